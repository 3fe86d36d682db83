//! The semaphore's safety under partitions, contention and node faults: never more holders than
//! permits, with the quorum of the rule, and the failure a majority quorum lets through.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redmutex::{Error, Redlock, Semaphore};
use redmutex_testenv::{Cluster, Mode, Proxies};

use crate::support::history::History;
use crate::support::{cleared_within, client, quick_semaphore};

#[test]
fn the_checker_counts_holders_at_once() {
    let t0 = Instant::now();
    let at = |ms| t0 + Duration::from_millis(ms);
    let history = History::new();
    history.record("a", at(0), at(30), at(100));
    history.record("b", at(10), at(40), at(100));
    history.record("c", at(30), at(50), at(100)); // starts as a ends
    assert_eq!(history.max_concurrent(), 2);
    history.record("d", at(20), at(60), at(25)); // held until 25 (its validity)
    assert_eq!(history.max_concurrent(), 3);
    history.assert_at_most(3);
    history.record("e", at(35), at(45), at(100)); // b, c and e at 35
    history.record("f", at(38), at(39), at(100)); // b, c, e and f at 38
    assert_eq!(history.max_concurrent(), 4);
    let fired = std::panic::catch_unwind(|| history.assert_at_most(3));
    assert!(
        fired.is_err(),
        "the checker must report 4 holders of 3 permits"
    );
}

/// Three clients, each cut off from a different one of 3 nodes (A sees 0 and 1, B sees 1 and 2,
/// C sees 0 and 2): the partitions of the counterexample to a majority quorum.
fn cut_off_one_node_each(cluster: &Cluster) -> Vec<Proxies> {
    (0..3)
        .map(|client| {
            let proxies = cluster.proxies();
            proxies.set_mode(&[(client + 2) % 3], Mode::Blackhole);
            proxies
        })
        .collect()
}

/// The test's own semaphore client with a majority quorum: the library's acquire script, sent
/// through `urls` to every node at once, and held when a majority of them admitted `value`.
async fn majority_acquire(urls: &[String], name: &str, value: &str, permits: u32) -> bool {
    let calls = urls.iter().map(|url| async move {
        let call = async {
            let mut node: MultiplexedConnection = redis::Client::open(url.as_str())
                .ok()?
                .get_multiplexed_async_connection()
                .await
                .ok()?;
            redis::cmd("EVAL")
                .arg(redmutex::internals::SEMAPHORE_ACQUIRE_SCRIPT)
                .arg(1)
                .arg(name)
                .arg(value)
                .arg(20_000)
                .arg(permits)
                .query_async::<i64>(&mut node)
                .await
                .ok()
        };
        tokio::time::timeout(Duration::from_millis(500), call)
            .await
            .ok()
            .flatten()
            == Some(0)
    });
    let admitted = futures::future::join_all(calls)
        .await
        .into_iter()
        .filter(|&admitted| admitted)
        .count();
    admitted > urls.len() / 2
}

/// The counterexample of the README made real. 3 nodes, 2 permits, three clients each cut off
/// from a different node. A majority quorum (2 of 3) lets all three in, while no node ever
/// admits more than 2: the failure this test must be able to see. The rule's quorum (3 of 3)
/// lets at most two in; here, none of the cut-off clients.
#[tokio::test]
async fn the_majority_counterexample_made_real_and_refused() {
    let cluster = Cluster::start(3);
    let proxies = cut_off_one_node_each(&cluster);

    let name = "semaphore:majority";
    let mut in_with_majority = 0;
    for (client, proxies) in proxies.iter().enumerate() {
        let value = format!("client-{client}");
        if majority_acquire(&proxies.urls(), name, &value, 2).await {
            in_with_majority += 1;
        }
    }
    assert_eq!(
        in_with_majority, 3,
        "a majority quorum admits 3 holders of 2 permits"
    );
    for node in cluster.nodes() {
        let admitted: i64 = redis::cmd("ZCOUNT")
            .arg(name)
            .arg(0)
            .arg("+inf")
            .query(&mut node.connection())
            .expect("ZCOUNT");
        assert_eq!(admitted, 2, "each node admitted only 2");
    }

    let name = "semaphore:rule";
    let mut clients = Vec::new();
    for proxies in &proxies {
        let redlock = Redlock::connect(proxies.urls()).await.expect("URLs parse");
        clients.push(quick_semaphore(&redlock, name, 2).with_tries(1));
    }
    let attempts = clients.iter().map(Semaphore::try_acquire);
    let results = futures::future::join_all(attempts).await;
    let held: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
    assert!(held.len() <= 2, "{results:?}");
    assert_eq!(clients[0].quorum(), 3);
    for result in &results {
        assert!(
            matches!(
                result,
                Err(Error::NoQuorum {
                    ok: 2,
                    quorum: 3,
                    ..
                })
            ),
            "two nodes reachable of the three needed: {result:?}"
        );
    }
    // The partitions heal: each attempt's held requests and its release arrive in order, and
    // nothing is left.
    for proxies in &proxies {
        proxies.set_mode(&[0, 1, 2], Mode::Pass);
    }
    cleared_within(Duration::from_secs(1), &cluster, name).await;
}

/// P = 2 over 5 nodes needs 4: one node down is tolerated, two are not.
#[tokio::test]
async fn fault_tolerance_matches_the_table() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let semaphore = quick_semaphore(&redlock, "semaphore:tolerance", 2).with_tries(1);
    let warm = semaphore.acquire().await.expect("all nodes up");
    warm.unlock().await.expect("unlock");

    cluster.node(3).kill();
    let first = semaphore.acquire().await.expect("4 of 5 nodes suffice");
    let second = semaphore.acquire().await.expect("4 of 5 nodes suffice");
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::Taken { .. })
    ));
    first.unlock().await.expect("4 of 5 nodes suffice");
    second.unlock().await.expect("4 of 5 nodes suffice");

    cluster.node(1).kill();
    match semaphore.acquire().await {
        Err(Error::NoQuorum {
            ok,
            quorum,
            total,
            failures,
        }) => {
            assert_eq!((ok, quorum, total), (3, 4, 5));
            let down: Vec<usize> = failures.iter().map(|f| f.node).collect();
            assert_eq!(down, [1, 3]);
        }
        other => panic!("expected NoQuorum with 2 of 5 down, got {other:?}"),
    }
    assert_eq!(semaphore.quorum(), 4);
}

/// 32 tasks on 4 clients take permits of a 3-permit semaphore over 5 nodes, for a few seconds
/// during which one node is killed and restarted after longer than the expiry: the history never
/// shows more than 3 holders at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_tasks_never_exceed_three_permits_across_a_delayed_restart() {
    let permits = 3;
    let expiry = Duration::from_secs(2);
    // Work goes on before the kill, while the node is down, and after it is back.
    let end = Instant::now() + expiry * 2 + Duration::from_secs(1);
    let cluster = Arc::new(Cluster::start(5));
    let history = Arc::new(History::new());
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&cluster).await);
    }
    let mut workers = Vec::new();
    for task in 0..32 {
        let semaphore = clients[task % 4]
            .new_semaphore("semaphore:contention", permits)
            .with_expiry(expiry)
            .with_timeout_factor(0.25)
            .with_tries(100_000)
            .with_retry_delay_fn(|_| Duration::from_micros(500 + rand::random_range(0..4500)));
        let history = Arc::clone(&history);
        workers.push(tokio::spawn(async move {
            while Instant::now() < end {
                let permit = semaphore
                    .acquire()
                    .await
                    .expect("a permit under contention");
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(2)).await; // the work
                history.record(
                    &format!("task-{task}"),
                    from,
                    Instant::now(),
                    permit.valid_until(),
                );
                match permit.unlock().await {
                    // A permit held on the killed node among 4 of 5 cannot confirm its release
                    // on 4; the reachable nodes gave it back all the same.
                    Ok(()) | Err(Error::NoQuorum { .. }) => {}
                    Err(error) => panic!("unlock: {error}"),
                }
            }
        }));
    }
    // Kill a node early on, and bring it back after longer than the expiry.
    tokio::time::sleep(Duration::from_millis(100)).await;
    cluster.node(2).kill();
    let faults = {
        let cluster = Arc::clone(&cluster);
        tokio::task::spawn_blocking(move || {
            std::thread::sleep(expiry + Duration::from_millis(100));
            cluster.node(2).restart();
        })
    };
    for worker in workers {
        worker.await.expect("worker finished");
    }
    faults.await.expect("restarted");
    assert!(history.len() >= 100, "{} critical sections", history.len());
    history.assert_at_most(permits as usize);
    assert!(
        history.max_concurrent() >= 2,
        "permits were held side by side"
    );
}
