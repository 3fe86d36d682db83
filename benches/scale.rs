//! Scale with names and waiters (issue 25), on 5 local nodes, one client:
//!
//! - **Many names**: while one client holds 10, 1,000 and 10,000 distinct locks, the lock+unlock
//!   rate of one more name, in interleaved rounds (10, 1,000, 10,000, 1,000, 10, ...); the client's
//!   live heap bytes per held lock (a counting global allocator: bytes live after taking N locks
//!   minus before, over N, the `Lock`s' own storage included), for handles on the default settings
//!   and for handles with a setter called on each; the nodes' `used_memory` per held lock against a
//!   plain `SET name value PX` of the same names and values (both orders).
//! - **Many waiters**: 1,000 waiters with wake-on-release, one per name on 1,000 names, in one
//!   client, while another client holds the names: channels and subscribers per node, the hand-off
//!   (unlock start -> the waiter's `lock()` returning, one name at a time) against 1 waiter on 1
//!   name, the nodes' commands per acquisition (`INFO commandstats`) while the names are handed
//!   off, and how long the subscriptions outlive the last waiter.
//! - **Fair**: 2, 8 and then 32 clients (a `Redlock` each) taking one fair name in turn: hand-off
//!   p50 and p99, subscriptions per node, the nodes' commands per acquisition, and the CPU time
//!   per acquisition of this process (every client's) and of the nodes.
//!
//! `cargo bench --bench scale`; `SCALE_SECS` (measured seconds per level and round, default 1.5),
//! `SCALE_ROUNDS` (default 3), `SCALE_ONLY` (`names`, `waiters` (with fair), `fair`, or `memory`
//! for the client memory lines alone; default all).

use std::alloc::System;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redmutex::{Lock, Redlock};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};

use commandstats::Counts;

#[path = "support/commandstats.rs"]
mod commandstats;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

const NODES: usize = 5;
const LEVELS: [usize; 3] = [10, 1_000, 10_000];
const HOLD: Duration = Duration::from_secs(600);
const TASKS: usize = 32;
const WAITERS: usize = 1_000;
const SINGLE_REPEATS: usize = 100;
const FAIR_CLIENTS: usize = 32;
const FAIR_SECS: u64 = 3;

type Res<T> = Result<T, String>;

fn main() {
    let secs: f64 = env("SCALE_SECS", 1.5);
    let rounds = env("SCALE_ROUNDS", 3.0) as usize;
    let only = std::env::var("SCALE_ONLY").unwrap_or_default();
    let cluster = redmutex_testenv::Cluster::start(NODES);
    let urls = cluster.urls();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return eprintln!("scale: runtime: {error}"),
    };
    println!(
        "scale: {NODES} local redis-server nodes, {} cores, current-thread runtime",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if (only.is_empty() || only == "names" || only == "memory")
        && let Err(error) = runtime.block_on(names(&cluster, &urls, secs, rounds))
    {
        eprintln!("scale: names: {error}");
    }
    if (only.is_empty() || only == "waiters")
        && let Err(error) = runtime.block_on(waiters(&cluster, &urls))
    {
        eprintln!("scale: waiters: {error}");
    }
    if only.is_empty() || only == "waiters" || only == "fair" {
        println!(
            "\nfair waiting: clients (one Redlock each) taking one fair name in turn, {FAIR_SECS} s each"
        );
        for clients in [2, 8, FAIR_CLIENTS] {
            if let Err(error) = runtime.block_on(fair(&cluster, &urls, clients)) {
                eprintln!("scale: fair with {clients} clients: {error}");
            }
        }
    }
}

fn env(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Heap bytes live now, by the counting allocator.
fn live_bytes() -> i128 {
    let stats = GLOBAL.stats();
    stats.bytes_allocated as i128 - stats.bytes_deallocated as i128
        + stats.bytes_reallocated as i128
}

/// Heap blocks live now.
fn live_blocks() -> i128 {
    let stats = GLOBAL.stats();
    stats.allocations as i128 - stats.deallocations as i128
}

fn held_name(i: usize) -> String {
    format!("bench:scale:held:{i}")
}

/// Takes the locks `held.len()..target` with `TASKS` tasks, or releases down to `target`.
async fn resize(redlock: &Redlock, held: &mut Vec<Lock>, target: usize) -> Res<()> {
    resize_with(redlock, held, target, Some(HOLD)).await
}

/// As `resize`, with handles whose expiry is set to `expiry` (one setter call on each, which
/// gives each handle its own copy of the settings), or left at the default when `None` (the
/// handles share the defaults; an unlock that finds the 8 s lock expired counts as released).
async fn resize_with(
    redlock: &Redlock,
    held: &mut Vec<Lock>,
    target: usize,
    expiry: Option<Duration>,
) -> Res<()> {
    if target < held.len() {
        let extra = held.split_off(target);
        let chunks: Vec<Vec<Lock>> = {
            let mut iter = extra.into_iter();
            let per = iter.len().div_ceil(TASKS).max(1);
            std::iter::from_fn(|| Some(iter.by_ref().take(per).collect::<Vec<_>>()))
                .take_while(|c| !c.is_empty())
                .collect()
        };
        let tasks: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                tokio::spawn(async move {
                    for lock in chunk {
                        match lock.unlock().await {
                            Err(redmutex::Error::Expired) if expiry.is_none() => {}
                            other => other.map_err(|e| e.to_string())?,
                        }
                    }
                    Ok::<_, String>(())
                })
            })
            .collect();
        for task in tasks {
            task.await.map_err(|e| e.to_string())??;
        }
        return Ok(());
    }
    let from = held.len();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                for i in (from + task..target).step_by(TASKS) {
                    let mut mutex = redlock.new_mutex(held_name(i));
                    if let Some(expiry) = expiry {
                        mutex = mutex.with_expiry(expiry);
                    }
                    let lock = mutex.lock().await.map_err(|e| format!("lock {i}: {e}"))?;
                    got.push((i, lock));
                }
                Ok::<_, String>(got)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(target - from);
    for task in tasks {
        all.extend(task.await.map_err(|e| e.to_string())??);
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    held.extend(all.into_iter().map(|(_, lock)| lock));
    Ok(())
}

#[derive(Default)]
struct Level {
    cycles: u64,
    secs: f64,
    latencies_ns: Vec<u64>,
}

async fn names(
    cluster: &redmutex_testenv::Cluster,
    urls: &[String],
    secs: f64,
    rounds: usize,
) -> Res<()> {
    let redlock = Redlock::connect(urls).await.map_err(|e| e.to_string())?;
    let mut held: Vec<Lock> = Vec::new();
    // Warm-up: every buffer and table the client grows while taking many locks is grown once.
    resize(&redlock, &mut held, 10_000).await?;
    resize(&redlock, &mut held, 0).await?;

    // Client memory per held lock, from none held: handles on the default settings (which share
    // one copy of them), and handles with a setter called on each (which copy them).
    println!("\nclient memory per held lock (live heap bytes after taking N locks minus before)");
    for (label, expiry) in [("default settings", None), ("with_expiry each", Some(HOLD))] {
        println!("  {label}:");
        for n in LEVELS {
            let (before, blocks) = (live_bytes(), live_blocks());
            let mut locks = Vec::with_capacity(n);
            resize_with(&redlock, &mut locks, n, expiry).await?;
            let grown = live_bytes() - before;
            let grown_blocks = live_blocks() - blocks;
            println!(
                "    N = {n:>6}: {:>6.0} bytes and {:.2} heap blocks per lock (a Lock itself is {} bytes)",
                grown as f64 / n as f64,
                grown_blocks as f64 / n as f64,
                std::mem::size_of::<Lock>()
            );
            resize_with(&redlock, &mut locks, 0, expiry).await?;
        }
        // What the handle a lock is taken from costs alone (no I/O): the part of a held lock that
        // holds the name and settings.
        let n = 10_000;
        let (before, blocks) = (live_bytes(), live_blocks());
        let mutexes: Vec<_> = (0..n)
            .map(|i| {
                let mutex = redlock.new_mutex(held_name(i));
                match expiry {
                    Some(expiry) => mutex.with_expiry(expiry),
                    None => mutex,
                }
            })
            .collect();
        println!(
            "    a Mutex handle alone ({n}): {:>6.0} bytes and {:.2} heap blocks each (a Mutex itself is {} bytes)",
            (live_bytes() - before) as f64 / n as f64,
            (live_blocks() - blocks) as f64 / n as f64,
            std::mem::size_of::<redmutex::Mutex>()
        );
        drop(mutexes);
    }
    if std::env::var("SCALE_ONLY").is_ok_and(|only| only == "memory") {
        return Ok(());
    }

    // Node memory per held lock against a plain SET of the same keys and values.
    println!("\nnode memory per held key (used_memory after minus before, mean of {NODES} nodes)");
    let mut probes: Vec<redis::Connection> =
        cluster.nodes().iter().map(|n| n.connection()).collect();
    let n = 10_000;
    for order in ["lock first", "SET first"] {
        let mut per = [0.0f64; 2]; // [lock, set]
        for step in 0..2 {
            let is_lock = (step == 0) == (order == "lock first");
            let before = used_memory(&mut probes)?;
            if is_lock {
                resize(&redlock, &mut held, n).await?;
                let after = used_memory(&mut probes)?;
                per[0] = (after - before) / n as f64;
                resize(&redlock, &mut held, 0).await?;
            } else {
                // The same names and values as the locks, taken and released just before.
                resize(&redlock, &mut held, n).await?;
                let pairs: Vec<(String, String)> = held
                    .iter()
                    .enumerate()
                    .map(|(i, l)| (held_name(i), l.value().to_owned()))
                    .collect();
                resize(&redlock, &mut held, 0).await?;
                let before = used_memory(&mut probes)?;
                for probe in &mut probes {
                    let mut pipe = redis::pipe();
                    for (key, value) in &pairs {
                        pipe.cmd("SET")
                            .arg(key)
                            .arg(value)
                            .arg("PX")
                            .arg(HOLD.as_millis() as u64)
                            .ignore();
                    }
                    pipe.exec(probe).map_err(|e| e.to_string())?;
                }
                let after = used_memory(&mut probes)?;
                per[1] = (after - before) / n as f64;
                for probe in &mut probes {
                    let mut pipe = redis::pipe();
                    for (key, _) in &pairs {
                        pipe.cmd("DEL").arg(key).ignore();
                    }
                    pipe.exec(probe).map_err(|e| e.to_string())?;
                }
            }
        }
        println!(
            "  {order:<10}: lock {:>6.1} B/key, plain SET {:>6.1} B/key, ratio {:.2}",
            per[0],
            per[1],
            per[0] / per[1]
        );
    }
    let mut keys_left = 0i64;
    for probe in &mut probes {
        keys_left += redis::cmd("DBSIZE")
            .query::<i64>(probe)
            .map_err(|e| e.to_string())?;
    }
    println!("  keys left on the nodes: {keys_left}");

    // Rate of one more name at each level, interleaved.
    let mut schedule = Vec::new();
    for _ in 0..rounds {
        schedule.extend([0, 1, 2, 1]);
    }
    schedule.push(0);
    let mut levels: Vec<Level> = LEVELS.iter().map(|_| Level::default()).collect();
    let mut floors: Vec<Level> = LEVELS.iter().map(|_| Level::default()).collect();
    let probe = redlock.new_mutex("bench:scale:probe");
    let mut nodes = Vec::new();
    for url in urls {
        let client = redis::Client::open(url.as_str()).map_err(|e| e.to_string())?;
        nodes.push(
            client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let floor = Floor {
        nodes,
        release: redis::Script::new(RELEASE),
    };
    let window = Duration::from_secs_f64(secs);
    for &level in &schedule {
        resize(&redlock, &mut held, LEVELS[level]).await?;
        // Warm-up of 0.2 s, then the window.
        let warm = Instant::now() + Duration::from_millis(200);
        while Instant::now() < warm {
            let lock = probe.lock().await.map_err(|e| e.to_string())?;
            lock.unlock().await.map_err(|e| e.to_string())?;
        }
        for _ in 0..200 {
            floor.cycle().await?;
        }
        // Half the window each, in alternating order from round to round.
        let half = window / 2;
        let library_first = levels[level].cycles <= floors[level].cycles;
        for library in [library_first, !library_first] {
            let start = Instant::now();
            let slot = if library {
                &mut levels[level]
            } else {
                &mut floors[level]
            };
            while start.elapsed() < half {
                let t = Instant::now();
                if library {
                    let lock = probe.lock().await.map_err(|e| e.to_string())?;
                    lock.unlock().await.map_err(|e| e.to_string())?;
                } else {
                    floor.cycle().await?;
                }
                slot.latencies_ns.push(t.elapsed().as_nanos() as u64);
                slot.cycles += 1;
            }
            slot.secs += start.elapsed().as_secs_f64();
        }
    }
    resize(&redlock, &mut held, 0).await?;
    println!(
        "\nlock+unlock of one more name while N are held (1 task; {rounds} interleaved rounds of \
         {secs} s per level)"
    );
    println!(
        "  contender          held N   cycles/s   p50 us   p99 us | rate x N=10  p50 x N=10 | rate x floor"
    );
    let base = rate_p50(&mut levels[0]);
    let floor_base = rate_p50(&mut floors[0]);
    for (i, n) in LEVELS.iter().enumerate() {
        let (rate, p50, p99) = rate_p50(&mut levels[i]);
        let (frate, fp50, fp99) = rate_p50(&mut floors[i]);
        println!(
            "  redmutex default   {n:>6} {rate:>10.0} {p50:>8.1} {p99:>8.1} | {:>11.2} {:>10.2} | {:>6.2}",
            rate / base.0,
            p50 / base.1,
            rate / frate
        );
        println!(
            "  floor wait-all     {n:>6} {frate:>10.0} {fp50:>8.1} {fp99:>8.1} | {:>11.2} {:>10.2} |",
            frate / floor_base.0,
            fp50 / floor_base.1
        );
    }
    Ok(())
}

/// The release script of the raw floor: delete the key only if it still holds our value.
const RELEASE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

/// The raw floor: `SET NX PX` on every node at once, then the release script on every node at
/// once, each phase waiting for every node (as the default does), on multiplexed connections.
struct Floor {
    nodes: Vec<redis::aio::MultiplexedConnection>,
    release: redis::Script,
}

impl Floor {
    async fn cycle(&self) -> Res<()> {
        let value = "bench-scale-floor-value-0123456789";
        let sets = self.nodes.iter().map(|node| {
            let mut node = node.clone();
            async move {
                redis::cmd("SET")
                    .arg("bench:scale:floor")
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async::<Option<String>>(&mut node)
                    .await
            }
        });
        for reply in futures::future::join_all(sets).await {
            reply.map_err(|e| e.to_string())?;
        }
        let releases = self.nodes.iter().map(|node| {
            let mut node = node.clone();
            let mut call = self.release.key("bench:scale:floor");
            call.arg(value);
            async move { call.invoke_async::<i64>(&mut node).await }
        });
        for reply in futures::future::join_all(releases).await {
            reply.map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// (cycles per second, p50 us, p99 us)
fn rate_p50(level: &mut Level) -> (f64, f64, f64) {
    level.latencies_ns.sort_unstable();
    let at = |q: f64| {
        let v = &level.latencies_ns;
        if v.is_empty() {
            return 0.0;
        }
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1] as f64 / 1e3
    };
    (level.cycles as f64 / level.secs, at(0.5), at(0.99))
}

fn used_memory(probes: &mut [redis::Connection]) -> Res<f64> {
    let mut sum = 0.0;
    for probe in probes.iter_mut() {
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query(probe)
            .map_err(|e| e.to_string())?;
        let value = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .ok_or("no used_memory")?;
        sum += value;
    }
    Ok(sum / probes.len() as f64)
}

/// Per node: (channels, subscribers over them, pattern subscriptions).
fn subscriptions(probes: &mut [redis::Connection]) -> Res<Vec<(usize, i64, i64)>> {
    let mut out = Vec::new();
    for probe in probes.iter_mut() {
        let channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query(probe)
            .map_err(|e| e.to_string())?;
        let mut subscribers = 0;
        for chunk in channels.chunks(500) {
            let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(chunk)
                .query(probe)
                .map_err(|e| e.to_string())?;
            subscribers += counts.iter().map(|(_, n)| n).sum::<i64>();
        }
        let patterns: i64 = redis::cmd("PUBSUB")
            .arg("NUMPAT")
            .query(probe)
            .map_err(|e| e.to_string())?;
        out.push((channels.len(), subscribers, patterns));
    }
    Ok(out)
}

/// Hand-offs of `names` names, one at a time: the holder unlocks name i and waits for its waiter's
/// `lock()` to return. Returns hand-off times in ns and when the last waiter had unlocked.
async fn handoffs(
    cluster: &redmutex_testenv::Cluster,
    holder: &Redlock,
    waiting: &Redlock,
    prefix: &str,
    names: usize,
    report: bool,
) -> Res<(Vec<u64>, Instant)> {
    let mut held = Vec::with_capacity(names);
    for i in 0..names {
        // The release publishes only when the holder's lock asked for wake-on-release too.
        let lock = holder
            .new_mutex(format!("{prefix}{i}"))
            .with_expiry(HOLD)
            .with_wake_on_release(true)
            .lock()
            .await
            .map_err(|e| e.to_string())?;
        held.push(lock);
    }
    let mut done = Vec::with_capacity(names);
    for i in 0..names {
        let mutex = waiting
            .new_mutex(format!("{prefix}{i}"))
            .with_expiry(HOLD)
            .with_wake_on_release(true)
            .with_tries(u32::MAX);
        let (tx, rx) = tokio::sync::oneshot::channel::<Res<Instant>>();
        tokio::spawn(async move {
            let result = match mutex.lock().await {
                Ok(lock) => {
                    let at = Instant::now();
                    lock.unlock().await.map(|()| at).map_err(|e| e.to_string())
                }
                Err(error) => Err(error.to_string()),
            };
            let _ = tx.send(result);
        });
        done.push(rx);
    }
    // Every waiter has tried once and subscribed: wait until each node has the channels.
    let mut probes: Vec<redis::Connection> =
        cluster.nodes().iter().map(|n| n.connection()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let subs = subscriptions(&mut probes)?;
        if subs.iter().all(|(channels, _, _)| *channels >= names) || Instant::now() > deadline {
            if report {
                println!(
                    "  while {names} waiters wait, per node (channels, subscribers, patterns):"
                );
                println!("    {subs:?}");
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = commandstats::read(&mut probes)?;
    let mut times = Vec::with_capacity(names);
    for (lock, rx) in held.into_iter().zip(done) {
        let start = Instant::now();
        lock.unlock().await.map_err(|e| e.to_string())?;
        let at = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .map_err(|_| "a waiter did not get its lock in 30 s".to_string())?
            .map_err(|e| e.to_string())??;
        times.push(at.saturating_duration_since(start).as_nanos() as u64);
    }
    let last = Instant::now();
    if report {
        let during = Counts::between(&before, &commandstats::read(&mut probes)?, false);
        println!(
            "  commands on the nodes while the {names} names were handed off one at a time \
             (INFO commandstats, the probe's own left out):"
        );
        print_commands(&during, names);
    }
    Ok((times, last))
}

/// Per acquisition: the commands clients sent to all nodes (as the compare bench's hand-off rows
/// count them), per node, and every command the nodes ran (sent and inside scripts).
fn print_commands(counts: &Counts, acquisitions: usize) {
    let per = |n: u64| n as f64 / acquisitions as f64;
    let by: Vec<String> = counts
        .by_name
        .iter()
        .map(|(name, n)| format!("{name} {:.2}", per(*n)))
        .collect();
    println!(
        "    per acquisition ({acquisitions}): sent {:.2} to all nodes ({:.2} per node), \
         all run {:.2}; by name (all nodes): {}",
        per(counts.sent),
        per(counts.sent) / NODES as f64,
        per(counts.sent + counts.in_scripts),
        by.join(", ")
    );
}

async fn waiters(cluster: &redmutex_testenv::Cluster, urls: &[String]) -> Res<()> {
    let holder = Redlock::connect(urls).await.map_err(|e| e.to_string())?;
    let waiting = Arc::new(Redlock::connect(urls).await.map_err(|e| e.to_string())?);
    let mut probes: Vec<redis::Connection> =
        cluster.nodes().iter().map(|n| n.connection()).collect();
    println!("\nwaiters with wake-on-release, one client waiting, another holding");

    let mut single = Vec::new();
    for _ in 0..SINGLE_REPEATS {
        let (times, _) = handoffs(cluster, &holder, &waiting, "bench:scale:one:", 1, false).await?;
        single.extend(times);
    }
    let (mut many, last) = handoffs(
        cluster,
        &holder,
        &waiting,
        "bench:scale:wait:",
        WAITERS,
        true,
    )
    .await?;
    single.sort_unstable();
    many.sort_unstable();
    let p = |v: &[u64], q: f64| {
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1] as f64 / 1e6
    };
    println!("  hand-off (unlock start -> waiter's lock() returns), one name at a time:");
    println!(
        "    1 name,  {SINGLE_REPEATS} times: p50 {:.3} ms  p99 {:.3} ms",
        p(&single, 0.5),
        p(&single, 0.99)
    );
    println!(
        "    {WAITERS} names, once each: p50 {:.3} ms  p99 {:.3} ms  (p50 x 1 name: {:.2})",
        p(&many, 0.5),
        p(&many, 0.99),
        p(&many, 0.5) / p(&single, 0.5)
    );
    let deadline = last + Duration::from_secs(60);
    loop {
        let subs = subscriptions(&mut probes)?;
        if subs.iter().all(|(c, _, p)| *c == 0 && *p == 0) {
            println!(
                "  subscriptions gone on every node {:.1} s after the last waiter unlocked",
                last.elapsed().as_secs_f64()
            );
            break;
        }
        if Instant::now() > deadline {
            println!("  subscriptions still there 60 s after the last waiter: {subs:?}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// `clients` clients, each its own `Redlock` (its own connections and listeners), take the fair
/// name in turn for `FAIR_SECS`: each takes it, lets go at once, and queues again. The hand-off is
/// from the holder's unlock starting to the next holder's `lock()` returning; with every other
/// client in line, every acquisition is one.
async fn fair(cluster: &redmutex_testenv::Cluster, urls: &[String], clients: usize) -> Res<()> {
    const NAME: &str = "bench:scale:fair";
    let mut redlocks = Vec::with_capacity(clients);
    for _ in 0..clients {
        redlocks.push(Redlock::connect(urls).await.map_err(|e| e.to_string())?);
    }
    let mutex = |redlock: &Redlock| {
        redlock
            .new_mutex(NAME)
            .with_fair(true)
            .with_tries(u32::MAX)
            .with_expiry(Duration::from_secs(8))
    };
    let mut probes: Vec<redis::Connection> =
        cluster.nodes().iter().map(|n| n.connection()).collect();
    // When the current holder began to let go (None: nobody has yet, or the hand-off was counted).
    let unlocking: Arc<std::sync::Mutex<Option<Instant>>> = Arc::default();
    let handoffs: Arc<std::sync::Mutex<Vec<u64>>> = Arc::default();
    let acquisitions = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let measuring = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The first client holds while the others join the line, so that every acquisition measured
    // is a hand-off.
    let first = mutex(&redlocks[0])
        .lock()
        .await
        .map_err(|e| e.to_string())?;
    let tasks: Vec<_> = redlocks
        .iter()
        .enumerate()
        .map(|(i, redlock)| {
            let mutex = mutex(redlock);
            let (unlocking, handoffs) = (Arc::clone(&unlocking), Arc::clone(&handoffs));
            let (acquisitions, measuring, stop) = (
                Arc::clone(&acquisitions),
                Arc::clone(&measuring),
                Arc::clone(&stop),
            );
            tokio::spawn(async move {
                if i == 0 {
                    // Client 0 already holds; it queues again after handing over below.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let lock = mutex.lock().await.map_err(|e| format!("client {i}: {e}"))?;
                    let at = Instant::now();
                    if let Some(start) = unlocking.lock().map_err(|e| e.to_string())?.take()
                        && measuring.load(std::sync::atomic::Ordering::Relaxed)
                    {
                        handoffs
                            .lock()
                            .map_err(|e| e.to_string())?
                            .push(at.saturating_duration_since(start).as_nanos() as u64);
                        acquisitions.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    *unlocking.lock().map_err(|e| e.to_string())? = Some(Instant::now());
                    lock.unlock()
                        .await
                        .map_err(|e| format!("client {i}: {e}"))?;
                }
                Ok::<_, String>(())
            })
        })
        .collect();
    // Every other client is in line once each node has its subscription.
    let deadline = Instant::now() + Duration::from_secs(30);
    let subs = loop {
        let subs = subscriptions(&mut probes)?;
        if subs
            .iter()
            .all(|(_, subscribers, _)| *subscribers >= clients as i64 - 1)
            || Instant::now() > deadline
        {
            break subs;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    *unlocking.lock().map_err(|e| e.to_string())? = Some(Instant::now());
    first.unlock().await.map_err(|e| e.to_string())?;
    // Half a second of warm-up, then the window.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = commandstats::read(&mut probes)?;
    let (client_cpu, node_cpu) = (process_cpu_secs()?, nodes_cpu_secs(&mut probes)?);
    let start = Instant::now();
    measuring.store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(FAIR_SECS)).await;
    measuring.store(false, std::sync::atomic::Ordering::Relaxed);
    let window = start.elapsed().as_secs_f64();
    let client_cpu = process_cpu_secs()? - client_cpu;
    let node_cpu = nodes_cpu_secs(&mut probes)? - node_cpu;
    let during = Counts::between(&before, &commandstats::read(&mut probes)?, true);
    let acquired = acquisitions.load(std::sync::atomic::Ordering::Relaxed);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .map_err(|_| "a client did not stop in 30 s".to_string())?
            .map_err(|e| e.to_string())??;
    }
    let mut times = std::mem::take(&mut *handoffs.lock().map_err(|e| e.to_string())?);
    times.sort_unstable();
    if times.is_empty() {
        return Err("no hand-off measured".into());
    }
    let p = |q: f64| {
        let rank = ((q * times.len() as f64).ceil() as usize).clamp(1, times.len());
        times[rank - 1] as f64 / 1e6
    };
    println!(
        "  {clients:>2} clients: {acquired} acquisitions ({:.0}/s), hand-off p50 {:.3} ms  p99 {:.3} ms",
        acquired as f64 / window,
        p(0.5),
        p(0.99)
    );
    println!(
        "    CPU per acquisition: this process (all {clients} clients) {:.3} ms, the nodes {:.3} ms \
         (all 5, user + sys)",
        client_cpu * 1e3 / acquired.max(1) as f64,
        node_cpu * 1e3 / acquired.max(1) as f64
    );
    println!("    while in line, per node (channels, subscribers, patterns): {subs:?}");
    print_commands(&during, acquired.max(1));
    Ok(())
}

/// User + system CPU seconds of this process so far (`/proc/self/stat`, in clock ticks of 10 ms).
fn process_cpu_secs() -> Res<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|e| e.to_string())?;
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').ok_or("unreadable /proc/self/stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => Ok((user + system) / 100.0),
        _ => Err("no utime/stime in /proc/self/stat".into()),
    }
}

/// The nodes' user + system CPU seconds so far (`INFO cpu`), summed.
fn nodes_cpu_secs(probes: &mut [redis::Connection]) -> Res<f64> {
    let mut sum = 0.0;
    for probe in probes.iter_mut() {
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query(probe)
            .map_err(|e| e.to_string())?;
        for key in ["used_cpu_user:", "used_cpu_sys:"] {
            sum += info
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .ok_or("no used_cpu in INFO cpu")?;
        }
    }
    Ok(sum)
}
