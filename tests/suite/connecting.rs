//! The ways to build a client: URLs (`redis://`, `valkey://`, and TLS URLs only with the `tls`
//! feature) and `redis::Client`s the caller built.

use std::time::Duration;

use redmutex::{Error, Redlock};
use redmutex_testenv::Cluster;

use crate::support;
use crate::support::{holders, quick};

#[tokio::test]
async fn valkey_urls_lock_and_unlock() {
    let cluster = Cluster::start(3);
    let mut urls = cluster.urls();
    // Mixed on purpose: the schemes mean the same.
    urls[0] = urls[0].replace("redis://", "valkey://");
    urls[2] = urls[2].replace("redis://", "VALKEY://");
    let redlock = Redlock::connect(&urls).await.expect("valkey:// parses");
    let lock = quick(&redlock, "connecting:valkey")
        .lock()
        .await
        .expect("lock");
    assert_eq!(
        holders(&cluster, "connecting:valkey", lock.value()),
        [0, 1, 2]
    );
    lock.unlock().await.expect("unlock");
    assert!(
        cluster
            .nodes()
            .iter()
            .all(|n| !n.exists("connecting:valkey"))
    );
}

#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn tls_urls_without_the_feature_are_config_errors_that_name_it() {
    for url in [
        "rediss://:secret-pw@127.0.0.1:6380/",
        "valkeys://127.0.0.1:6380/",
    ] {
        let error = Redlock::connect(["redis://127.0.0.1:6379/", url])
            .await
            .expect_err("no TLS without the feature");
        let Error::Config { field, rule } = &error else {
            panic!("expected Error::Config, got {error:?}");
        };
        assert_eq!(field, "urls[1]");
        assert!(rule.contains("`tls` feature"), "{rule}");
        assert!(!error.to_string().contains("secret-pw"), "{error}");
    }
}

#[tokio::test]
async fn from_clients_works_like_connect() {
    let cluster = Cluster::start(3);
    let password = "from-clients-pw";
    for node in cluster.nodes() {
        node.acl_setuser("app", &["on", &format!(">{password}"), "~*", "&*", "+@all"]);
    }
    let clients: Vec<redis::Client> = cluster
        .urls()
        .iter()
        .map(|url| url.replace("redis://", &format!("redis://app:{password}@")))
        .map(|url| redis::Client::open(url).expect("URL"))
        .collect();
    let redlock = Redlock::from_clients(clients).await.expect("clients");
    let debug = format!("{redlock:?}");
    assert!(debug.contains("redis://127.0.0.1:"), "{debug}");
    assert!(!debug.contains(password), "{debug}");

    // Wake-up on release works for a client built this way: the listeners use the clients.
    let mutex = quick(&redlock, "connecting:from-clients")
        .with_wake_on_release(true)
        .with_retry_delay(Duration::from_secs(60))
        .with_tries(10);
    let holder = mutex.lock().await.expect("lock");
    let waiter = {
        let mutex = mutex.clone();
        tokio::spawn(async move { mutex.lock().await })
    };
    support::eventually("the waiter subscribed", || {
        let channel = "redmutex:released:connecting:from-clients";
        cluster.nodes().iter().all(|n| n.subscribers(channel) == 1)
    })
    .await;
    holder.unlock().await.expect("unlock");
    let next = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release")
        .expect("task ran")
        .expect("lock");
    next.unlock().await.expect("unlock");

    let none: Vec<redis::Client> = Vec::new();
    assert!(matches!(
        Redlock::from_clients(none).await,
        Err(Error::Config { .. })
    ));
}
