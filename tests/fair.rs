//! Fair waiting (`Mutex::with_fair`): one line across clients, served in join order.

mod support;

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redmutex::{Mutex, Redlock};
use support::client;
use testenv::Cluster;

fn fair(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_fair(true)
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_tries(200)
}

#[tokio::test]
async fn waiters_of_many_clients_get_the_lock_in_join_order() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster).await;
    let name = "fair:order";
    let held = fair(&holder, name).lock().await.expect("free lock");
    let order = Arc::new(StdMutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..8 {
        let redlock = client(&cluster).await;
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let lock = fair(&redlock, name).lock().await.expect("served in line");
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(5)).await;
            lock.unlock().await.expect("unlock");
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released = Instant::now();
    held.unlock().await.expect("unlock");
    for waiter in waiters {
        waiter.await.expect("no panic");
    }
    println!("served in {:?}", released.elapsed());
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
}
