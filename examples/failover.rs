//! How long leader election takes to fail over, and what a leader's renewals cost.
//!
//! Failover: a leader runs in a child process (this program again, with `--lead`); a standby in
//! this process campaigns; the child is killed with SIGKILL at a random point of its renewal
//! period, and the time until the standby's `campaign()` returns is measured, over RUNS runs
//! (default 50). Renewal cost: one leader renews for ten seconds, and the nodes' own counters
//! (`INFO commandstats`) say how many requests and how much of each node's time that took.
//!
//! ```text
//! cargo run --release --example failover -- [RUNS] [LEASE_MS]   # 3 local redis-server nodes
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use redmutex::Redlock;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const NAME: &str = "failover:bench";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, urls, lease] = &args[..]
        && flag == "--lead"
    {
        return lead(urls, lease.parse()?).await;
    }
    let runs: usize = args.first().map_or(Ok(50), |a| a.parse())?;
    let lease = Duration::from_millis(args.get(1).map_or(Ok(1000), |a| a.parse())?);
    let cluster = redmutex_testenv::Cluster::try_start(3)?;
    let urls = cluster.urls().join(",");
    let redlock = Redlock::connect(cluster.urls()).await?;
    let election = redlock.new_election(NAME).with_expiry(lease);
    let renew = election.renew_every();

    let mut times = Vec::new();
    for _ in 0..runs {
        let mut child = Command::new(std::env::current_exe()?)
            .args(["--lead", &urls, &lease.as_millis().to_string()])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().ok_or("no stdout")?).read_line(&mut line)?;
        if line.trim() != "leading" {
            return Err(format!("the child said {line:?}").into());
        }
        let standby = tokio::spawn({
            let election = election.clone();
            async move { election.campaign("standby").await }
        });
        // Killed anywhere in its renewal period.
        tokio::time::sleep(renew.mul_f64(1.0 + rand::random::<f64>())).await;
        let killed = Instant::now();
        child.kill()?;
        let leadership = standby.await??;
        times.push(killed.elapsed());
        child.wait()?;
        leadership.resign().await?;
    }
    times.sort();
    let at = |q: f64| times[((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "failover over {runs} runs, lease {:.0} ms, renewal every {:.0} ms: \
         p50 {:.0} ms ({:.2} x lease), p99 {:.0} ms ({:.2} x lease), max {:.0} ms; \
         target lease + renewal + 50 ms = {:.0} ms",
        ms(lease),
        ms(renew),
        ms(at(0.5)),
        at(0.5).as_secs_f64() / lease.as_secs_f64(),
        ms(at(0.99)),
        at(0.99).as_secs_f64() / lease.as_secs_f64(),
        ms(times[times.len() - 1]),
        ms(lease + renew) + 50.0,
    );

    // Renewal cost: one leader, ten seconds, counted by the nodes.
    let before = stats(&cluster)?;
    let leadership = election.campaign("leader").await?;
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    leadership.resign().await?;
    let after = stats(&cluster)?;
    let (mut calls, mut usec) = (0.0, 0.0);
    for (b, a) in before.iter().zip(&after) {
        calls += (a.0 - b.0) as f64;
        usec += (a.1 - b.1) as f64;
    }
    let nodes = cluster.len() as f64;
    let seconds = window.as_secs_f64();
    println!(
        "renewal cost of one leader (lease {:.0} ms): {:.2} scripts per node per second, \
         {:.1} us of node time per node per second",
        ms(lease),
        calls / nodes / seconds,
        usec / nodes / seconds,
    );
    Ok(())
}

/// The child: leads, says so, and waits to be killed.
async fn lead(urls: &str, lease: u64) -> Result<(), BoxError> {
    let redlock = Redlock::connect(urls.split(',')).await?;
    let election = redlock
        .new_election(NAME)
        .with_expiry(Duration::from_millis(lease));
    let leadership = election.campaign("leader").await?;
    println!("leading");
    leadership.lost().await;
    Ok(())
}

/// Each node's EVALSHA calls and their microseconds so far.
fn stats(cluster: &redmutex_testenv::Cluster) -> Result<Vec<(u64, u64)>, BoxError> {
    let mut all = Vec::new();
    for node in cluster.nodes() {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut node.connection())?;
        let line = info
            .lines()
            .find(|l| l.starts_with("cmdstat_evalsha:"))
            .unwrap_or("cmdstat_evalsha:calls=0,usec=0");
        let field = |name: &str| -> u64 {
            line.split([':', ','])
                .find_map(|kv| kv.strip_prefix(name))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        all.push((field("calls="), field("usec=")));
    }
    Ok(all)
}
