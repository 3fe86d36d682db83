//! A critical section three times longer than the lock's expiry, kept under `lock.run(...)`.
//!
//! The lock expires after 1 s and the work takes 3 s. `run` renews the lock every third of the
//! expiry while the work runs (retrying a renewal that a blip of the nodes made fail), releases it
//! when the work is done, and would drop the work before the lock's validity ended if the lock
//! could not be kept. Meanwhile a second client tries the same lock and is refused; once `run` has
//! returned, it gets the lock at once. Exits with 1 if the work could not finish or the second
//! client got the lock while the owner worked.
//!
//! ```text
//! cargo run --example heartbeat                    # 5 throwaway local redis-server nodes
//! REDMUTEX_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 \
//!     cargo run --example heartbeat                # your own independent nodes
//! ```

mod common;

use common::{BoxError, exit_code, nodes};

use std::process::ExitCode;
use std::time::{Duration, Instant};

use redmutex::{Error, Mutex, Redlock};

const EXPIRY: Duration = Duration::from_secs(1);
const STEPS: u32 = 10;
const STEP: Duration = Duration::from_millis(300);
/// When the second client tries: past the point where the lock would have expired without the
/// renewals.
const RIVAL_AFTER: Duration = Duration::from_millis(1_500);

#[tokio::main]
async fn main() -> ExitCode {
    exit_code(run().await)
}

/// Returns whether the work finished under the lock and the second client was refused meanwhile.
async fn run() -> Result<bool, BoxError> {
    // Kept until the end: dropping the cluster stops the local nodes.
    let (urls, _cluster) = nodes()?;
    // Two clients, as two processes would have.
    let owner = Redlock::connect(&urls).await?;
    let rival = Redlock::connect(&urls).await?;
    // Unique per process, so runs against shared nodes never meet.
    let name = format!(
        "redmutex-example:{}:heartbeat:nightly-report",
        std::process::id()
    );

    let started = Instant::now();
    let lock = owner
        .new_mutex(name.as_str())
        .with_expiry(EXPIRY)
        .lock()
        .await?;
    println!(
        "{} owner: locked {name} with a {} ms expiry; the work takes {} ms",
        at(started),
        EXPIRY.as_millis(),
        (STEP * STEPS).as_millis(),
    );
    // What the work may want to know of the lock is read before: `run` takes it.
    let valid = lock.clone();

    let rival_mutex = rival.new_mutex(name.as_str()).with_expiry(EXPIRY);
    let trying = tokio::spawn(try_to_take(rival_mutex.clone(), started));

    let work = async {
        for step in 1..=STEPS {
            tokio::time::sleep(STEP).await; // the work itself
            let left = valid
                .valid_until()
                .saturating_duration_since(Instant::now());
            println!(
                "{} worker: step {step}/{STEPS} done, the lock valid for another {} ms",
                at(started),
                left.as_millis()
            );
        }
        STEPS
    };
    let finished = match lock.run(work).await {
        Ok(steps) => {
            println!("{} owner: {steps} steps done, unlocked", at(started));
            true
        }
        Err(Error::Lost { cause }) => {
            println!(
                "{} owner: lock lost ({cause}), the work was stopped",
                at(started)
            );
            false
        }
        Err(error) => return Err(error.into()),
    };
    let refused = trying.await?;
    drop(valid);

    // Released the moment `run` returned, not left to expire.
    let after = match rival_mutex.try_lock().await {
        Ok(lock) => {
            lock.unlock().await?;
            "got it at once"
        }
        Err(error) => {
            println!(
                "{} other client: try_lock after the work failed: {error}",
                at(started)
            );
            "did not get it"
        }
    };
    println!(
        "\n{}: {STEPS} steps of {} ms under a {} ms lock; second client {} during the work and {after} \
         after it",
        if finished { "finished" } else { "aborted" },
        STEP.as_millis(),
        EXPIRY.as_millis(),
        if refused {
            "refused with Error::Taken"
        } else {
            "not refused with Error::Taken (see above)"
        },
    );
    Ok(finished && refused)
}

/// A second client trying the lock mid-work; returns whether it was refused as taken.
async fn try_to_take(mutex: Mutex, started: Instant) -> bool {
    tokio::time::sleep(RIVAL_AFTER).await;
    match mutex.try_lock().await {
        Err(Error::Taken { nodes }) => {
            println!(
                "{} other client: try_lock refused, held by another owner on nodes {nodes:?}",
                at(started)
            );
            true
        }
        Err(error) => {
            println!("{} other client: try_lock failed: {error}", at(started));
            false
        }
        Ok(lock) => {
            println!(
                "{} other client: got the lock while the owner was working!",
                at(started)
            );
            if let Err(error) = lock.unlock().await {
                println!("{} other client: unlock failed: {error}", at(started));
            }
            false
        }
    }
}

/// Seconds since `started`, as a log prefix.
fn at(started: Instant) -> String {
    format!("{:5.2}s", started.elapsed().as_secs_f64())
}
