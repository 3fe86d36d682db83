//! rslock under redmutex's comparison harness.
//!
//! Run by `benches/compare.rs` (`cargo bench --bench compare`) against the same nodes as the other
//! contenders; prints one JSON line per row on stdout (the format of `target/bench-compare.jsonl`).
//!
//! ```text
//! rslock-bench --urls redis://127.0.0.1:7001/,... --runtime current-thread \
//!     --workload contended-8 --secs 3 --warmup-ms 500 --retry-ms 2 --prefix r7
//! ```

use std::process::ExitCode;
use std::time::Duration;

use rslock::{Lock, LockManager};

#[path = "../../../benches/support/harness.rs"]
mod harness;

use harness::{Contender, EXPIRY, Flavor, TRIES, Timing, Workload};

/// The contender's name in the table: crate and version.
const NAME: &str = "rslock 0.10.0";

/// One task's rslock client: a clone of the shared `LockManager` and the task's resource.
struct Rslock {
    manager: LockManager,
    resource: Vec<u8>,
    held: Option<Lock>,
}

impl Contender for Rslock {
    async fn lock(&mut self) -> bool {
        match self.manager.lock(&self.resource, EXPIRY).await {
            Ok(lock) => {
                self.held = Some(lock);
                true
            }
            Err(_) => false,
        }
    }

    async fn unlock(&mut self) -> bool {
        match self.held.take() {
            // rslock's unlock reports nothing: best effort on every node.
            Some(lock) => {
                self.manager.unlock(&lock).await;
                true
            }
            None => false,
        }
    }
}

struct Args {
    urls: Vec<String>,
    flavor: Flavor,
    workload: Workload,
    timing: Timing,
    prefix: String,
}

fn parse_args() -> Result<Args, String> {
    let mut urls = None;
    let mut flavor = None;
    let mut workload = None;
    let mut secs = 3.0;
    let mut warmup_ms = 500.0;
    let mut retry_ms = 2.0;
    let mut prefix = String::from("rslock");
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| format!("{flag}: not a number: {value:?}"))
        };
        match flag.as_str() {
            "--urls" => urls = Some(value.split(',').map(str::to_owned).collect()),
            "--runtime" => flavor = Some(Flavor::parse(&value)?),
            "--workload" => workload = Some(Workload::parse(&value)?),
            "--secs" => secs = number()?,
            "--warmup-ms" => warmup_ms = number()?,
            "--retry-ms" => retry_ms = number()?,
            "--prefix" => prefix = value,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args {
        urls: urls.ok_or("--urls is required")?,
        flavor: flavor.ok_or("--runtime is required")?,
        workload: workload.ok_or("--workload is required")?,
        timing: Timing {
            warmup: Duration::from_secs_f64(warmup_ms / 1000.0),
            measure: Duration::from_secs_f64(secs),
            retry_delay: Duration::from_secs_f64(retry_ms / 1000.0),
        },
        prefix,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(error) => {
            eprintln!("rslock-bench: {error}");
            return ExitCode::FAILURE;
        }
    };
    let urls = args.urls;
    let retry_delay = args.timing.retry_delay;
    let row = harness::run_row(
        NAME,
        args.flavor,
        args.workload,
        args.timing,
        &args.prefix,
        |names| async move {
            // One manager per process, as rslock intends; every task holds a clone.
            let mut manager = LockManager::new(urls);
            // rslock waits a random 0..delay between attempts (redmutex: exactly the delay).
            manager.set_retry(TRIES, retry_delay.max(Duration::from_millis(1)));
            Ok(names
                .into_iter()
                .map(|name| Rslock {
                    manager: manager.clone(),
                    resource: name.into_bytes(),
                    held: None,
                })
                .collect())
        },
    );
    println!("{}", row.to_json(&[]));
    ExitCode::SUCCESS
}
