//! Many clients racing for one name: mutual exclusion, checked by what it protects.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use redmutex::Redlock;
use redmutex_testenv::Cluster;

use crate::support;
use crate::support::contended;

async fn clients(cluster: &Cluster, n: usize) -> Vec<Redlock> {
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(support::client(cluster).await);
    }
    clients
}

/// 16 tasks on 4 clients each make 25 non-atomic GET -> SET increments under the lock: a lost update
/// would show as a count below 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_atomic_increments_are_never_lost() {
    let cluster = Cluster::start(5);
    let counter = redmutex_testenv::Cluster::start(1);
    let clients = clients(&cluster, 4).await;
    let count = support::increments_under_lock(&clients, "contention:counter", &counter).await;
    assert_eq!(count, "400");
}

/// One item in stock, 50 buyers at once: exactly one sale.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_item_is_sold_once() {
    let cluster = Cluster::start(5);
    cluster.node(0).set("stock", "1");
    let stock_url = cluster.node(0).url();
    let clients = clients(&cluster, 5).await;
    let sales = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(50));
    let mut buyers = Vec::new();
    for buyer in 0..50 {
        let mutex = contended(&clients[buyer % 5], "contention:sku-1");
        let (url, sales, start) = (stock_url.clone(), Arc::clone(&sales), Arc::clone(&start));
        buyers.push(tokio::spawn(async move {
            let mut store = redis::Client::open(url)
                .expect("valid URL")
                .get_multiplexed_async_connection()
                .await
                .expect("node is up");
            start.wait().await;
            let lock = mutex.lock().await.expect("lock under contention");
            let stock: i64 = store.get("stock").await.expect("GET");
            if stock > 0 {
                tokio::time::sleep(Duration::from_millis(1)).await; // the payment
                let _: () = store.set("stock", stock - 1).await.expect("SET");
                sales.fetch_add(1, Ordering::SeqCst);
            }
            lock.unlock().await.expect("unlock");
        }));
    }
    for buyer in buyers {
        buyer.await.expect("buyer finished");
    }
    assert_eq!(sales.load(Ordering::SeqCst), 1);
    assert_eq!(cluster.node(0).get("stock").as_deref(), Some("0"));
}
