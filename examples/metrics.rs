//! A service that serves its metrics to Prometheus at `/metrics` while its tasks contend for a few
//! names: redmutex's series (the `metrics` feature, see doc/metrics.md) are recorded into
//! metrics-exporter-prometheus's recorder, which renders them; the endpoint is a few lines over a
//! `TcpListener` here, and in a real service a route of its own HTTP server.
//!
//! ```text
//! cargo run --example metrics --features metrics            # 5 throwaway local nodes, 60 s
//! cargo run --example metrics --features metrics -- 600     # for 10 minutes
//! curl -s http://127.0.0.1:9898/metrics | grep redmutex_    # meanwhile
//! ```
//!
//! `REDMUTEX_NODES` names your own nodes, and `METRICS_ADDR` the address to serve on.

mod common;

use common::{BoxError, exit_code, nodes};

use std::process::ExitCode;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use redmutex::Redlock;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The names the workers contend for: few, so that they wait for each other.
pub const NAMES: [&str; 3] = ["report", "invoice", "ledger"];

/// Histogram buckets for the `_seconds` series, from a fast local acquisition to a long hold.
pub const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

#[tokio::main]
async fn main() -> ExitCode {
    exit_code(run().await)
}

async fn run() -> Result<bool, BoxError> {
    let seconds = match std::env::args().nth(1) {
        Some(arg) => arg
            .parse()
            .map_err(|_| format!("not a number of seconds: {arg}"))?,
        None => 60,
    };
    let (urls, _cluster) = nodes()?;
    let handle = recorder()?.install_recorder()?;
    let addr = std::env::var("METRICS_ADDR").unwrap_or_else(|_| "127.0.0.1:9898".to_owned());
    let listener = TcpListener::bind(&addr).await?;
    println!(
        "serving http://{}/metrics for {seconds} s",
        listener.local_addr()?
    );
    let redlock = Redlock::connect(&urls).await?;
    let prefix = format!("redmutex-example:{}:metrics:", std::process::id());
    tokio::spawn(contend(redlock, prefix, 8));
    tokio::spawn(serve(listener, handle));
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    Ok(true)
}

/// metrics-exporter-prometheus's recorder, with buckets for the `_seconds` series (the exporter
/// makes summaries otherwise, whose quantiles cannot be added up across instances).
pub fn recorder() -> Result<PrometheusBuilder, BoxError> {
    Ok(PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &BUCKETS)?)
}

/// `workers` tasks, each taking one of [`NAMES`] (under `prefix`) after another, forever: a
/// mutex per name, with wake-up on release, a metrics label per use, and a short piece of work.
pub async fn contend(redlock: Redlock, prefix: String, workers: usize) {
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..workers {
        let redlock = redlock.clone();
        let prefix = prefix.clone();
        tasks.spawn(async move {
            for round in 0usize.. {
                let name = NAMES[(worker + round) % NAMES.len()];
                let mutex = redlock
                    .new_mutex(format!("{prefix}{name}"))
                    .with_expiry(Duration::from_secs(2))
                    .with_wake_on_release(true)
                    .with_metrics_label(name);
                match mutex.lock().await {
                    Ok(lock) => {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        // A failed unlock leaves the key to expire; the metrics count it.
                        let _ = lock.unlock().await;
                    }
                    Err(error) => eprintln!("worker {worker}: {error}"),
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
}

/// Serves `GET /metrics` on `listener`: the Prometheus text that `handle` renders.
pub async fn serve(listener: TcpListener, handle: PrometheusHandle) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            if let Err(error) = answer(stream, &handle).await {
                eprintln!("metrics endpoint: {error}");
            }
        });
    }
}

/// Answers one HTTP/1.1 request and closes the connection.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut request = Vec::new();
    let mut buffer = [0u8; 1024];
    // The request line and headers; a scraper sends no body with GET.
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        request.extend_from_slice(&buffer[..read]);
    }
    let line = request.split(|&b| b == b'\r').next().unwrap_or_default();
    let (status, body) = if line.starts_with(b"GET /metrics ") {
        ("200 OK", handle.render())
    } else {
        ("404 Not Found", "not found\n".to_owned())
    };
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
