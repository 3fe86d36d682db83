//! TLS (the `tls` feature) against nodes that serve TLS with a throwaway CA made at test time:
//! every operation over `from_clients` with a private CA, mutual TLS, and the failures of a client
//! that presents no certificate or trusts the wrong CA.
#![cfg(feature = "tls")]

// Its own binary, built only with the `tls` feature (see tests/suite/main.rs).
#[path = "suite/support/mod.rs"]
#[allow(dead_code)] // it uses a few of the suite's helpers
mod support;

use std::time::{Duration, Instant};

use redis::{ClientTlsConfig, TlsCertificates};
use redmutex::{Error, Mutex, NodeErrorKind, Redlock};
use redmutex_testenv::{Cluster, Identity, Tls};
use support::holders;

/// Clients for `urls` that trust `ca_pem`, presenting `identity` if given.
fn clients(urls: &[String], ca_pem: &str, identity: Option<&Identity>) -> Vec<redis::Client> {
    urls.iter()
        .map(|url| {
            let certificates = TlsCertificates {
                root_cert: Some(ca_pem.as_bytes().to_vec()),
                client_tls: identity.map(|identity| ClientTlsConfig {
                    client_cert: identity.cert_pem.as_bytes().to_vec(),
                    client_key: identity.key_pem.as_bytes().to_vec(),
                }),
            };
            redis::Client::build_with_tls(url.as_str(), certificates).expect("a TLS client")
        })
        .collect()
}

fn mutex(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(10))
        .with_timeout_factor(0.05)
        .with_retry_delay(Duration::from_millis(5))
        .with_tries(3)
}

#[tokio::test]
async fn every_operation_works_over_tls_with_a_private_ca() {
    let tls = Tls::new();
    let cluster = Cluster::start_tls(3, &tls);
    let clients = clients(&cluster.tls_urls(), tls.ca_pem(), None);
    let redlock = Redlock::from_clients(clients).await.expect("clients");
    assert!(format!("{redlock:?}").contains("rediss://127.0.0.1:"));
    let mutex = mutex(&redlock, "tls:all");

    let lock = mutex.lock().await.expect("lock");
    assert_eq!(holders(&cluster, "tls:all", lock.value()), [0, 1, 2]);
    assert!(matches!(mutex.try_lock().await, Err(Error::Taken { .. })));
    lock.extend().await.expect("extend");
    lock.unlock().await.expect("unlock");

    let fenced = mutex.clone().with_fencing(true);
    let first = fenced.lock().await.expect("fenced lock");
    first.unlock().await.expect("unlock");
    let second = fenced.lock().await.expect("fenced lock");
    assert!(second.token() > first.token());
    second.unlock().await.expect("unlock");

    // Wake-up on release: the listeners connect through the same clients, over TLS.
    let waking = mutex
        .clone()
        .with_wake_on_release(true)
        .with_retry_delay(Duration::from_secs(60))
        .with_tries(10);
    let holder = waking.lock().await.expect("lock");
    let waiter = {
        let waking = waking.clone();
        tokio::spawn(async move { waking.lock().await })
    };
    support::eventually("the waiter subscribed", || {
        let channel = "redmutex:released:tls:all";
        cluster.nodes().iter().all(|n| n.subscribers(channel) == 1)
    })
    .await;
    holder.unlock().await.expect("unlock");
    let next = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release, not by its minute of retry delay")
        .expect("task ran")
        .expect("lock");
    next.unlock().await.expect("unlock");
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let tls = Tls::new().require_client_certs(true);
    let cluster = Cluster::start_tls(3, &tls);
    let urls = cluster.tls_urls();

    let identity = tls.client_identity();
    let with_certificate = Redlock::from_clients(clients(&urls, tls.ca_pem(), Some(&identity)))
        .await
        .expect("clients");
    let lock = mutex(&with_certificate, "tls:mutual")
        .lock()
        .await
        .expect("lock");
    assert_eq!(holders(&cluster, "tls:mutual", lock.value()), [0, 1, 2]);
    lock.unlock().await.expect("unlock");

    let without = Redlock::from_clients(clients(&urls, tls.ca_pem(), None))
        .await
        .expect("clients");
    let started = Instant::now();
    let result = mutex(&without, "tls:mutual").lock().await;
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
    let Err(Error::NoQuorum { failures, .. }) = result else {
        panic!("expected NoQuorum, got {result:?}");
    };
    assert_eq!(failures.len(), 3);
    for failure in failures {
        let NodeErrorKind::Redis(error) = &failure.kind else {
            panic!("expected the node's TLS error, got {failure}");
        };
        // rustls: "received fatal alert: CertificateRequired".
        assert!(error.to_string().contains("CertificateRequired"), "{error}");
    }
    assert!(holders(&cluster, "tls:mutual", "").is_empty());
}

#[tokio::test]
async fn the_wrong_ca_fails_per_node_without_hanging() {
    let tls = Tls::new();
    let cluster = Cluster::start_tls(3, &tls);
    let stranger = Tls::new();
    let redlock = Redlock::from_clients(clients(&cluster.tls_urls(), stranger.ca_pem(), None))
        .await
        .expect("clients");
    let started = Instant::now();
    let result = mutex(&redlock, "tls:wrong-ca").lock().await;
    assert!(started.elapsed() < Duration::from_secs(10), "no hang");
    let Err(Error::NoQuorum {
        ok: 0, failures, ..
    }) = result
    else {
        panic!("expected NoQuorum, got {result:?}");
    };
    assert_eq!(failures.len(), 3);
    for failure in &failures {
        let text = failure.to_string();
        assert!(text.contains("certificate"), "{text}");
        assert!(
            !failure.kind.is_refusal(),
            "a TLS failure may be transient: {text}"
        );
    }
}

#[tokio::test]
async fn rediss_urls_verify_against_the_system_roots() {
    // A throwaway CA is in no system store: connect parses rediss:// and valkeys:// URLs, and the
    // handshake then refuses the nodes' certificates, per node.
    let tls = Tls::new();
    let cluster = Cluster::start_tls(3, &tls);
    let mut urls = cluster.tls_urls();
    urls[2] = urls[2].replace("rediss://", "valkeys://");
    let redlock = Redlock::connect(&urls).await.expect("TLS URLs parse");
    let result = mutex(&redlock, "tls:system-roots").lock().await;
    let Err(Error::NoQuorum { failures, .. }) = result else {
        panic!("expected NoQuorum, got {result:?}");
    };
    for failure in &failures {
        assert!(failure.to_string().contains("certificate"), "{failure}");
    }
    assert_eq!(failures.len(), 3);
}
