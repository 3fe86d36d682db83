//! Fencing tokens stop a holder that paused past its lock.
//!
//! Worker A takes the lock and then stalls (here: a sleep longer than the lock's expiry, standing in
//! for a GC pause, a swap storm or SIGSTOP). The lock expires; worker B takes it and writes the
//! account. A wakes up still believing it holds the lock and writes too, but the account is written
//! through `fenced_set`, which refuses A's older token. Without the token check, A's stale write
//! would have overwritten B's.
//!
//! ```text
//! cargo run --example fenced_write
//! REDMUTEX_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 \
//!     cargo run --example fenced_write   # the account is kept on the first node
//! ```

mod common;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use common::{BoxError, exit_code, nodes};
use redmutex::{Redlock, fenced_set};

const EXPIRY: Duration = Duration::from_millis(500);

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    exit_code(run().await)
}

async fn run() -> Result<bool, BoxError> {
    let (urls, _cluster) = nodes()?;
    let first = urls.first().ok_or("no Redis node given")?;
    let name = format!("redmutex-example:{}:account-lock", std::process::id());
    let account = format!("redmutex-example:{}:account", std::process::id());
    let mut store = redis::Client::open(first.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    let worker_a = Redlock::connect(&urls).await?;
    let worker_b = Redlock::connect(&urls).await?;
    let mutex = |redlock: &Redlock| {
        redlock
            .new_mutex(name.as_str())
            .with_fencing(true)
            .with_expiry(EXPIRY)
            .with_retry_delay(Duration::from_millis(20))
            .with_tries(100)
    };

    let a = mutex(&worker_a).lock().await?;
    let token_a = a.token().ok_or("fencing is on")?;
    println!(
        "A: locked with token {token_a}, then stalls for {:?}",
        EXPIRY * 2
    );
    tokio::time::sleep(EXPIRY * 2).await;

    let b = mutex(&worker_b).lock().await?;
    let token_b = b.token().ok_or("fencing is on")?;
    let b_accepted = fenced_set(&mut store, &account, "balance=90 (by B)", token_b).await?;
    println!("B: locked with token {token_b}; write accepted: {b_accepted}");
    b.unlock().await?;

    let stale = a.valid_until() < Instant::now();
    let a_accepted = fenced_set(&mut store, &account, "balance=100 (by A)", token_a).await?;
    println!(
        "A: wakes up (lock expired: {stale}), writes with token {token_a}; accepted: {a_accepted}"
    );

    let kept: Option<String> = redis::cmd("GET")
        .arg(&account)
        .query_async(&mut store)
        .await?;
    println!("account now: {}", kept.as_deref().unwrap_or("<missing>"));
    let _: () = redis::cmd("DEL")
        .arg(&account)
        .arg(format!("{account}:last-token"))
        .query_async(&mut store)
        .await?;
    Ok(b_accepted && !a_accepted)
}
