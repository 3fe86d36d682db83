//! The oversell race: buyers on several machines compete for the last few items of one product.
//!
//! The stock lives in one Redis key and each sale is read-modify-write (GET the stock, talk to the
//! payment provider, SET it one lower): the kind of update a distributed lock exists to protect. The
//! race runs twice: first without a lock, where buyers read the same stock and sell it many times
//! over, then with redmutex, where exactly the stock is sold. Exits with 1 if the locked run sold
//! anything but the stock, so it doubles as a smoke test.
//!
//! ```text
//! cargo run --example inventory                    # 5 throwaway local redis-server nodes
//! cargo run --example inventory -- --locked-only   # or --unlocked-only
//! REDMUTEX_NODES=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 \
//!     cargo run --example inventory                # your own independent nodes
//! ```
//!
//! The stock key is kept on the first node. Keys are named after this process and the run, and are
//! removed at the end.

#[path = "../common/mod.rs"]
mod common;

use common::{BoxError, exit_code, nodes};

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redmutex::redis::{self, AsyncCommands};
use redmutex::{Mutex, Redlock};
use tokio::sync::Barrier;
use tokio::task::JoinSet;

/// Items of sku-42 in stock when each run starts.
const STOCK: i64 = 3;
const MACHINES: usize = 4;
const BUYERS_PER_MACHINE: usize = 10;
/// Time "talking to the payment provider" between reading and writing the stock: the window in
/// which, without a lock, other buyers read the same stock.
const PAYMENT: Duration = Duration::from_millis(3);
/// Far longer than a sale takes, short enough that a crashed buyer blocks the others only briefly.
const LOCK_EXPIRY: Duration = Duration::from_secs(2);
/// Attempts, a few ms apart, for the last of 40 buyers to get its turn: about 30 suffice on
/// loopback, the rest is margin for slower nodes.
const LOCK_TRIES: u32 = 200;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Unlocked,
    Locked,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::Unlocked => "without a lock:",
            Mode::Locked => "with redmutex: ",
        }
    }

    fn key_part(self) -> &'static str {
        match self {
            Mode::Unlocked => "unlocked",
            Mode::Locked => "locked",
        }
    }
}

/// One machine of the shop, with its own lock client and its own connection to the stock, as a
/// separate process would have.
struct Machine {
    redlock: Redlock,
    shop: redis::aio::MultiplexedConnection,
}

struct Outcome {
    sold: i64,
    /// What the stock key says after the run.
    left: i64,
    elapsed: Duration,
}

#[tokio::main]
async fn main() -> ExitCode {
    exit_code(run().await)
}

/// Runs the selected races; returns false if the locked run sold anything but the stock.
async fn run() -> Result<bool, BoxError> {
    let modes = modes_from_args()?;
    // Kept until the end: dropping the cluster stops the local nodes.
    let (urls, _cluster) = nodes()?;
    let machines = connect_machines(&urls).await?;
    println!(
        "{MACHINES} machines x {BUYERS_PER_MACHINE} buyers, {STOCK} items of sku-42 in stock, \
         {} Redis nodes\n",
        urls.len()
    );

    let mut correct = true;
    for mode in modes {
        let outcome = race(&machines, mode).await?;
        println!(
            "{} stock {STOCK}, sold {} ({}); the stock key now says {}; took {} ms",
            mode.label(),
            outcome.sold,
            verdict(outcome.sold),
            outcome.left,
            outcome.elapsed.as_millis(),
        );
        if mode == Mode::Locked && (outcome.sold != STOCK || outcome.left != 0) {
            correct = false;
        }
    }
    Ok(correct)
}

fn verdict(sold: i64) -> String {
    if sold > STOCK {
        format!("oversold by {}", sold - STOCK)
    } else if sold < STOCK {
        format!("no oversell, but {} unsold", STOCK - sold)
    } else {
        "no oversell".to_owned()
    }
}

fn modes_from_args() -> Result<Vec<Mode>, BoxError> {
    let mut modes = vec![Mode::Unlocked, Mode::Locked];
    for arg in std::env::args().skip(1) {
        modes = match arg.as_str() {
            "--locked-only" => vec![Mode::Locked],
            "--unlocked-only" => vec![Mode::Unlocked],
            other => {
                return Err(format!(
                    "unknown argument {other:?}; expected --locked-only or --unlocked-only"
                )
                .into());
            }
        };
    }
    Ok(modes)
}

async fn connect_machines(urls: &[String]) -> Result<Vec<Machine>, BoxError> {
    let stock_node = urls.first().ok_or("no Redis node given")?;
    let mut machines = Vec::new();
    for _ in 0..MACHINES {
        let redlock = Redlock::connect(urls).await?;
        let shop = redis::Client::open(stock_node.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        machines.push(Machine { redlock, shop });
    }
    Ok(machines)
}

/// Stocks the shop, lets every buyer loose at once and counts the sales.
async fn race(machines: &[Machine], mode: Mode) -> Result<Outcome, BoxError> {
    // Unique per process and run, so runs against shared nodes never meet.
    let base = format!(
        "redmutex-example:{}:{}",
        std::process::id(),
        mode.key_part()
    );
    let stock_key = format!("{base}:stock:sku-42");
    let lock_name = format!("{base}:inventory:sku-42");

    let mut shop = machines.first().ok_or("no machines")?.shop.clone();
    let () = shop.set(&stock_key, STOCK).await?;

    // Every buyer starts at the same moment, as when a sale opens.
    let start_line = Arc::new(Barrier::new(MACHINES * BUYERS_PER_MACHINE));
    let started = Instant::now();
    let mut buyers = JoinSet::new();
    for machine in machines {
        let mutex = machine
            .redlock
            .new_mutex(lock_name.as_str())
            .with_expiry(LOCK_EXPIRY)
            .with_tries(LOCK_TRIES)
            // Short and jittered: buyers that collided on one attempt spread apart on the next.
            .with_retry_delay_fn(|_attempt| {
                Duration::from_micros(rand::random_range(1_000..5_000))
            });
        for _ in 0..BUYERS_PER_MACHINE {
            let start_line = Arc::clone(&start_line);
            let mutex = mutex.clone();
            let mut shop = machine.shop.clone();
            let stock_key = stock_key.clone();
            buyers.spawn(async move {
                start_line.wait().await;
                match mode {
                    Mode::Unlocked => sell_one(&mut shop, &stock_key).await,
                    Mode::Locked => sell_one_locked(&mutex, &mut shop, &stock_key).await,
                }
            });
        }
    }

    // Every buyer is awaited before the first error is returned, so none is still writing when
    // the stock key is removed.
    let mut sold = 0;
    let mut first_error: Option<BoxError> = None;
    while let Some(joined) = buyers.join_next().await {
        match joined {
            Ok(Ok(true)) => sold += 1,
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                first_error.get_or_insert(error);
            }
            Err(error) => {
                first_error.get_or_insert(error.into());
            }
        }
    }
    let elapsed = started.elapsed();

    let left: i64 = shop.get(&stock_key).await?;
    let _removed: usize = shop.del(&stock_key).await?;
    match first_error {
        Some(error) => Err(error),
        None => Ok(Outcome {
            sold,
            left,
            elapsed,
        }),
    }
}

/// One purchase, read-modify-write. The stock check and the write are separate commands with a
/// pause between them, so nothing but a lock stops two buyers from selling the same item.
async fn sell_one(
    shop: &mut redis::aio::MultiplexedConnection,
    stock_key: &str,
) -> Result<bool, BoxError> {
    let stock: i64 = shop.get(stock_key).await?;
    if stock <= 0 {
        return Ok(false);
    }
    tokio::time::sleep(PAYMENT).await;
    let () = shop.set(stock_key, stock - 1).await?;
    Ok(true)
}

/// One purchase under the lock. The sale takes milliseconds against a 2 s expiry; a critical
/// section that can come close to the expiry must check `Lock::valid_until` before writing (see
/// the heartbeat example).
async fn sell_one_locked(
    mutex: &Mutex,
    shop: &mut redis::aio::MultiplexedConnection,
    stock_key: &str,
) -> Result<bool, BoxError> {
    let lock = mutex.lock().await?;
    let sold = sell_one(shop, stock_key).await;
    // Unlock even after a failed sale, so the next buyer need not wait out the expiry.
    let unlocked = lock.unlock().await;
    let sold = sold?;
    unlocked?;
    Ok(sold)
}
