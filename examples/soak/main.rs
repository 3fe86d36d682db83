//! A nemesis soak: client processes run every primitive at once on a few names while a seeded
//! nemesis breaks the deployment at random; every call and critical section is recorded on
//! CLOCK_MONOTONIC, and the merged history is checked at the end (see `checker.rs`).
//!
//! ```text
//! cargo run --release --example soak -- --seconds 60 [--seed 42] [--keep]
//! ```
//!
//! Four members: three standalone nodes and a Redis Cluster of three masters with a replica each
//! (and a standalone node apart, never faulted, for the resources that check fencing tokens);
//! three client processes, each through proxies of its own to the standalone nodes (a cluster
//! client finds the cluster's nodes by their own addresses). In runs with an odd seed, one task
//! of each client also locks on the cluster member alone with `with_replica_acks(1)`, on names
//! of its own. After the clients stop and every lock has expired, the nodes may keep only the
//! documented counters and records (`leftovers.rs`); any other key counts as a violation. Each
//! client's resident memory is sampled, and in runs of 2 minutes or more the first and the last
//! minute of every client that lived that long are compared (`checker::growths`). The last line is
//! `soak: <ops> operations, <violations> violations, <faults> faults, <seconds> s`, and the exit
//! status is non-zero on any violation. The histories are kept (their directory is printed) when
//! there is a violation, or with `--keep`. The same seed replays the same faults in the same order
//! (their effects depend on timing).

mod checker;
mod client;
mod history;
mod leftovers;
mod nemesis;
mod processes;
mod record;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use history::{Event, History, monotonic};
use processes::ClientProcess;
use record::Recorder;

/// Any error, for a run that reports and exits.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CLIENTS: usize = 3;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = if args.first().map(String::as_str) == Some("--client") {
        client_process(&args[1..]).map(|()| true)
    } else {
        soak(&args)
    };
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("soak: error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `--client NAME HISTORY URLS CLUSTER ACKS STORE DEADLINE SEED`, as `processes.rs` starts it.
fn client_process(args: &[String]) -> Result<(), BoxError> {
    let [process, history, urls, cluster, acks, store, deadline, seed] = args else {
        return Err(format!("bad client arguments: {args:?}").into());
    };
    let spec = client::Spec {
        process: process.clone(),
        history: history.into(),
        urls: urls.split(',').map(String::from).collect(),
        cluster: cluster.clone(),
        acks: acks == "acks",
        store: store.clone(),
        deadline: deadline.parse()?,
        seed: seed.parse()?,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(client::run(spec))
}

fn soak(args: &[String]) -> Result<bool, BoxError> {
    let mut seconds = 60u64;
    let mut seed = rand::random::<u64>();
    let mut keep = false;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--keep" {
            keep = true;
            continue;
        }
        let value = args.next().ok_or(format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--seconds" => seconds = value.parse()?,
            "--seed" => seed = value.parse()?,
            _ => return Err(format!("unknown argument {arg}").into()),
        }
    }
    // Odd seeds add the locks on the cluster member alone, with replica acks.
    let acks = seed % 2 == 1;
    println!(
        "soak: seed {seed}, {seconds} s, replica acks on the cluster member: {}",
        if acks { "yes" } else { "no" }
    );
    let began = Instant::now();
    let dir = std::env::temp_dir().join(format!("redmutex-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let nodes = redmutex_testenv::Cluster::try_start(3)?;
    let member = redmutex_testenv::RedisCluster::try_start(3, 1)?;
    let store = redmutex_testenv::Cluster::try_start(1)?;
    // One `connect` entry: a cluster client that starts from any of them.
    let cluster = member.urls().join("|");
    let deadline = monotonic() + seconds * 1_000_000_000;
    let run = processes::Run {
        cluster,
        acks,
        store: store.node(0).url(),
        dir: dir.clone(),
        deadline,
        seed,
    };
    let mut clients = (0..CLIENTS)
        .map(|slot| ClientProcess::spawn(slot, nodes.proxies(), run.clone()))
        .collect::<Result<Vec<_>, _>>()?;

    let counts = {
        let recorder = Recorder::create(&dir.join("nemesis.jsonl"))?;
        let mut nemesis = nemesis::Nemesis::new(&nodes, &member, &mut clients, recorder, seed);
        nemesis.run_until(deadline)?;
        nemesis.counts
    };
    // The clients stop on their own at the deadline, after at most their grace for stuck calls.
    let mut stuck = 0;
    for client in &mut clients {
        if !client.finish(Duration::from_secs(20))? {
            eprintln!("soak: {} did not stop, and was killed", client.name);
            stuck += 1;
        }
    }

    // Nothing may stay but counters and records once every lock has expired.
    std::thread::sleep(leftovers::quiet(client::EXPIRY));
    let left = leftovers::find(&nodes, &member);
    for (node, key, ttl) in &left {
        println!("leftover: node {node} keeps {key:?} (PTTL {ttl} ms)");
    }

    let mut events: Vec<Event> = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        events.extend(History::parse_lines(&text).map_err(|e| format!("{path:?}: {e}"))?);
    }
    let history = History::from_events(events);
    let violations = checker::check(&history);
    for violation in &violations {
        println!("violation: {violation}");
    }
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for violation in &violations {
        *by_kind.entry(violation.kind()).or_default() += 1;
    }
    if seconds * 1_000_000_000 < checker::MEMORY_CHECKED_AFTER {
        println!("memory: not checked (run shorter than 2 min)");
    } else {
        let growths = checker::growths(&history);
        if growths.is_empty() {
            println!("memory: not checked (no client lived 2 min)");
        }
        for growth in growths {
            println!("memory: {growth}");
        }
    }
    let faults: u64 = counts.values().sum();
    println!(
        "soak: {} sections, {} fenced writes, {} client processes",
        history.sections.len(),
        history.writes.len(),
        history
            .calls
            .iter()
            .map(|c| c.process.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len()
    );
    println!("soak: faults by kind {counts:?}");
    println!(
        "soak: violations by kind {by_kind:?}, clients that did not stop: {stuck}, keys left: {}",
        left.len()
    );
    let total = violations.len() + stuck + left.len();
    if total == 0 && !keep {
        std::fs::remove_dir_all(&dir)?;
    } else {
        println!("soak: histories kept in {}", dir.display());
    }
    println!(
        "soak: {} operations, {total} violations, {faults} faults, {} s",
        history.calls.len(),
        began.elapsed().as_secs()
    );
    Ok(total == 0)
}
