//! A critical section three times longer than the lock's expiry, kept alive by explicit `extend()`.
//!
//! The lock expires after 1 s and the work takes 3 s. A heartbeat task holding a clone of the lock
//! extends it every third of the expiry and tells the worker if an extend fails; the worker starts
//! each step only if the lock stays valid for the whole step. Meanwhile a second client tries the
//! same lock and is refused. At the end the owner unlocks, and the heartbeat, whose next extend
//! then returns `Error::Unlocked`, stops by itself. Exits with 1 if the work could not finish or
//! the second client got the lock.
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

use redmutex::{Error, Lock, Mutex, Redlock};
use tokio::sync::oneshot::{self, error::TryRecvError};

const EXPIRY: Duration = Duration::from_secs(1);
/// A third of the expiry: after one failed or late beat, the next still comes in time.
const BEAT: Duration = Duration::from_millis(333);
const STEPS: u32 = 10;
const STEP: Duration = Duration::from_millis(300);
/// When the second client tries: past the point where the lock would have expired without the
/// heartbeat.
const RIVAL_AFTER: Duration = Duration::from_millis(1_500);

#[tokio::main]
async fn main() -> ExitCode {
    exit_code(run().await)
}

/// Returns whether the work finished under the lock and the second client was refused.
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

    let (lost_sender, lost) = oneshot::channel();
    let heartbeat = tokio::spawn(heartbeat(lock.clone(), lost_sender, started));
    let rival = tokio::spawn(try_to_take(
        rival.new_mutex(name.as_str()).with_expiry(EXPIRY),
        started,
    ));

    let finished = work(&lock, lost, started).await;

    match lock.unlock().await {
        Ok(()) => println!("{} owner: unlocked", at(started)),
        Err(error) => {
            println!("{} owner: unlock failed: {error}", at(started));
            // It would not learn of an unlock that did not happen.
            heartbeat.abort();
        }
    }
    let extensions = match heartbeat.await {
        Ok(extensions) => extensions,
        Err(error) if error.is_cancelled() => 0,
        Err(error) => return Err(error.into()),
    };
    let refused = rival.await?;

    println!(
        "\n{}: {STEPS} steps of {} ms planned under a {} ms lock, {extensions} extensions, \
         second client {}",
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

/// Extends the lock every `BEAT` until the owner unlocks or an extend fails, and tells the worker
/// through `lost` in the latter case. Returns the number of extensions.
async fn heartbeat(lock: Lock, lost: oneshot::Sender<Error>, started: Instant) -> u32 {
    let mut extensions = 0;
    loop {
        tokio::time::sleep(BEAT).await;
        match lock.extend().await {
            Ok(()) => {
                extensions += 1;
                println!(
                    "{} heartbeat: extended, valid for another {} ms",
                    at(started),
                    remaining(&lock).as_millis()
                );
            }
            Err(Error::Unlocked) => {
                println!("{} heartbeat: the owner unlocked, stopping", at(started));
                return extensions;
            }
            // An extend still in flight when the owner unlocks finds the keys deleted and fails
            // with `Expired`; the worker is done (it dropped the receiver), so nothing is lost.
            Err(_) if lost.is_closed() => {
                println!("{} heartbeat: the owner finished, stopping", at(started));
                return extensions;
            }
            Err(error) => {
                // A failed extend leaves the lock as it was, so one could retry until
                // `valid_until`; this heartbeat gives up at once and lets the worker stop.
                println!("{} heartbeat: extend failed: {error}", at(started));
                // Fails only if the worker has finished already, when there is no one to tell.
                let _ = lost.send(error);
                return extensions;
            }
        }
    }
}

/// Does the work in steps, starting each only if the lock stays valid for the whole step and the
/// heartbeat has not reported it lost. Returns whether every step was done.
async fn work(lock: &Lock, mut lost: oneshot::Receiver<Error>, started: Instant) -> bool {
    for step in 1..=STEPS {
        match lost.try_recv() {
            Ok(error) => {
                println!(
                    "{} worker: stopping before step {step}: lock lost ({error})",
                    at(started)
                );
                return false;
            }
            // The heartbeat ended without a word, so it panicked and nothing extends the lock.
            Err(TryRecvError::Closed) => {
                println!(
                    "{} worker: stopping before step {step}: the heartbeat is gone",
                    at(started)
                );
                return false;
            }
            Err(TryRecvError::Empty) => {}
        }
        let left = remaining(lock);
        if left < STEP {
            println!(
                "{} worker: stopping before step {step}: {} ms of validity left, a step takes {} ms",
                at(started),
                left.as_millis(),
                STEP.as_millis()
            );
            return false;
        }
        // The work itself.
        tokio::time::sleep(STEP).await;
        println!("{} worker: step {step}/{STEPS} done", at(started));
    }
    true
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

fn remaining(lock: &Lock) -> Duration {
    lock.valid_until().saturating_duration_since(Instant::now())
}

/// Seconds since `started`, as a log prefix.
fn at(started: Instant) -> String {
    format!("{:5.2}s", started.elapsed().as_secs_f64())
}
