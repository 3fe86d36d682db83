//! The keys and notice channels of each primitive on standalone nodes (see the guide's *Keys and
//! notice channels*): the lock key is the name, every key beside it carries the name's slot prefix
//! (`{name}:fence`, `{user:1}:cart::fence`), notices go out by `PUBLISH` on
//! `redmutex:released:<name>`, and fencing counters left by the previous layout keep tokens
//! increasing.

use std::time::Duration;

use futures::StreamExt;
use redmutex::Error;
use redmutex_testenv::Cluster;

use crate::support::{self, AHEAD, beside, client, eventually, micros_now, quick};

/// The value of `key` on every node.
fn on_every_node(cluster: &Cluster, key: &str) -> Vec<Option<String>> {
    cluster.nodes().iter().map(|node| node.get(key)).collect()
}

/// Whether `key` exists on every node.
fn everywhere(cluster: &Cluster, key: &str) -> bool {
    cluster.nodes().iter().all(|node| node.exists(key))
}

#[tokio::test]
async fn a_fenced_mutex_keeps_its_counter_in_the_name_slot() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    for (name, counter) in [
        ("keys:order:42", "{keys:order:42}:fence"),
        ("{keys:user:1}:cart", "{keys:user:1}:cart::fence"),
    ] {
        assert_eq!(beside(name, ":fence"), counter);
        let lock = quick(&redlock, name)
            .with_fencing(true)
            .lock()
            .await
            .expect("free");
        let token = lock.token().expect("fenced").to_string();
        assert_eq!(on_every_node(&cluster, counter), vec![Some(token); 3]);
        assert_eq!(
            on_every_node(&cluster, &format!("{name}:fence")),
            [None, None, None],
            "nothing at the previous layout's key"
        );
        lock.unlock().await.expect("unlock");
        assert!(everywhere(&cluster, counter), "the counter stays");
    }
}

#[tokio::test]
async fn readers_and_a_waiting_writer_keep_their_keys_in_the_name_slot() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    for name in ["keys:prices", "{keys:shop}:prices"] {
        let rwlock = redlock
            .new_rwlock(name)
            .with_expiry(Duration::from_secs(10))
            .with_tries(1);
        let reader = rwlock.read().await.expect("free");
        let readers = beside(name, ":readers");
        assert!(readers.ends_with("}:readers") || readers.ends_with("::readers"));
        assert!(everywhere(&cluster, &readers), "{readers}");
        assert!(!everywhere(&cluster, &format!("{name}:readers")));
        assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
        assert!(everywhere(&cluster, &beside(name, ":writer-waiting")));
        reader.unlock().await.expect("unlock");
        assert!(
            !cluster.node(0).exists(&readers),
            "the last reader takes the set"
        );
    }
    assert_eq!(
        beside("{keys:shop}:prices", ":readers"),
        "{keys:shop}:prices::readers"
    );
}

#[tokio::test]
async fn a_fair_line_is_in_the_name_slot() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "{keys:queue}:head";
    let fair = || {
        quick(&redlock, name)
            .with_expiry(Duration::from_secs(10))
            .with_tries(1000)
            .with_fair(true)
    };
    let holder = fair().lock().await.expect("free");
    let waiter = tokio::spawn({
        let waiter = fair();
        async move { waiter.lock().await }
    });
    let line = beside(name, ":line");
    assert_eq!(line, "{keys:queue}:head::line");
    eventually("the waiter stands in line", || everywhere(&cluster, &line)).await;
    assert!(everywhere(&cluster, &beside(name, ":line:until")));
    assert!(everywhere(&cluster, &beside(name, ":ticket")));
    holder.unlock().await.expect("unlock");
    let lock = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("handed the lock")
        .expect("task")
        .expect("locked");
    lock.unlock().await.expect("unlock");
}

#[tokio::test]
async fn a_multi_name_lock_fences_each_name_beside_it() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let names = ["keys:from", "{keys:acct}:to"];
    let lock = redlock
        .new_multi_mutex(names)
        .with_fencing(true)
        .lock()
        .await
        .expect("free");
    let token = lock.token().expect("fenced").to_string();
    for counter in ["{keys:from}:fence", "{keys:acct}:to::fence"] {
        assert_eq!(
            on_every_node(&cluster, counter),
            vec![Some(token.clone()); 3]
        );
    }
    lock.unlock().await.expect("unlock");
}

/// On a standalone server every release notice goes out with `PUBLISH` on the channel of today,
/// one per name, each on that name's own channel, with the released value: a multi-name lock's
/// release and a forced release alike.
#[tokio::test]
async fn each_name_is_released_on_its_own_channel() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let names = ["keys:notice:a", "{keys:notice}:b"];
    let channels = names.map(|name| format!("redmutex:released:{name}"));
    let client = redis::Client::open(cluster.node(0).url()).expect("a URL");
    let mut pubsub = client.get_async_pubsub().await.expect("a subscriber");
    pubsub.subscribe(&channels).await.expect("subscribed");
    let mut messages = pubsub.into_on_message();
    let mut next = async || {
        let message = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .expect("a notice")
            .expect("the connection stays");
        let payload: String = message.get_payload().expect("text");
        (message.get_channel_name().to_owned(), payload)
    };

    let multi = redlock.new_multi_mutex(names).with_wake_on_release(true);
    let lock = multi.lock().await.expect("free");
    let value = lock.value().to_owned();
    // Somebody waits (its marks are there): the release notifies.
    for name in names {
        support::mark_waited(&cluster, name);
    }
    lock.unlock().await.expect("unlock");
    let mut heard = vec![next().await, next().await];
    heard.sort();
    assert_eq!(
        heard,
        [
            (channels[0].clone(), value.clone()),
            (channels[1].clone(), value)
        ]
    );

    let held = multi.lock().await.expect("free");
    assert_eq!(multi.force_unlock().await.expect("forced"), 3);
    let mut heard = vec![next().await, next().await];
    heard.sort();
    assert_eq!(
        heard,
        [
            (channels[0].clone(), held.value().to_owned()),
            (channels[1].clone(), held.value().to_owned())
        ]
    );
}

/// A counter the previous layout left at `<name>:fence` (41) is read by the next fenced acquire
/// on a standalone server, so the next token is 42, not 1; the raise writes the new counter,
/// which stays ahead from then on. For every primitive that fences: a mutex, a multi-name lock, a
/// read-write lock's writer.
#[tokio::test]
async fn tokens_go_on_from_a_counter_of_the_previous_layout() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let (mutex, multi, writer) = ("keys:old:mutex", "keys:old:multi", "keys:old:writer");
    // Ahead of the nodes' clocks, so that the counters decide the tokens.
    let old = AHEAD + 41;
    for name in [mutex, multi, "keys:old:other", writer] {
        for node in cluster.nodes() {
            node.set(&format!("{name}:fence"), &old.to_string());
        }
    }
    let fenced = |name| redlock.new_mutex(name).with_fencing(true);
    let lock = fenced(mutex).lock().await.expect("free");
    assert_eq!(lock.token(), Some(old + 1));
    lock.unlock().await.expect("unlock");
    let lock = fenced(mutex).lock().await.expect("free");
    assert_eq!(lock.token(), Some(old + 2));
    lock.unlock().await.expect("unlock");
    assert_eq!(
        on_every_node(&cluster, &beside(mutex, ":fence")),
        vec![Some((old + 2).to_string()); 3]
    );
    assert_eq!(
        on_every_node(&cluster, &format!("{mutex}:fence")),
        vec![Some(old.to_string()); 3],
        "read, never written"
    );

    let names = redlock
        .new_multi_mutex([multi, "keys:old:fresh"])
        .with_fencing(true);
    let lock = names.lock().await.expect("free");
    assert_eq!(lock.token(), Some(old + 1));
    lock.unlock().await.expect("unlock");

    let rwlock = redlock.new_rwlock(writer).with_fencing(true);
    let lock = rwlock.write().await.expect("free");
    assert_eq!(lock.token(), Some(old + 1));
    lock.unlock().await.expect("unlock");
}

/// What the previous layout left at `<name>:fence` was a counter of ours only if it is a number:
/// anything else there counts as no counter, and locking goes on: the token is the nodes' clock.
#[tokio::test]
async fn anything_else_at_the_old_counter_counts_as_none() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    for node in cluster.nodes() {
        node.set("keys:junk:fence", "not a number");
        let mut connection = node.connection();
        let _: i64 = redis::cmd("RPUSH")
            .arg("keys:list:fence")
            .arg("x")
            .query(&mut connection)
            .expect("RPUSH");
    }
    for name in ["keys:junk", "keys:list"] {
        let before = micros_now();
        let lock = quick(&redlock, name)
            .with_fencing(true)
            .lock()
            .await
            .expect("the old key is ignored");
        let token = lock.token().expect("fenced");
        // The nodes' clock in microseconds, plus one: this machine's, a second of slack for a
        // clock that steps back.
        assert!(
            (before - 1_000_000..AHEAD).contains(&token),
            "{name}: {token}"
        );
        lock.unlock().await.expect("unlock");
    }
}

/// A name with a `}` and no hash tag has no slot prefix: a plain mutex takes it (lock, inspect,
/// force_unlock), and everything that would keep keys or a channel beside it refuses it.
#[tokio::test]
async fn a_name_without_a_slot_prefix_takes_plain_locks_only() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "keys:job}1";
    let mutex = quick(&redlock, name);
    let lock = mutex.lock().await.expect("a plain mutex takes it");
    assert!(mutex.inspect().await.expect("inspected").is_held());
    assert_eq!(mutex.force_unlock().await.expect("forced"), 3);
    assert!(!mutex.inspect().await.expect("inspected").is_held());
    assert!(matches!(lock.unlock().await, Err(Error::Expired)));
    let refused = |result: Result<redmutex::Lock, Error>| match result {
        Err(Error::Config { field, rule }) => {
            assert_eq!(field, "name");
            assert!(rule.contains("no hash tag"), "{rule}");
        }
        other => panic!("expected a config error, got {other:?}"),
    };
    refused(mutex.clone().with_fencing(true).lock().await);
    refused(mutex.clone().with_fair(true).lock().await);
    refused(redlock.new_rwlock(name).read().await);
    assert_eq!(support::present(&cluster, name), Vec::<usize>::new());
}

/// Inspection and a forced release look at the keys where the primitives keep them: a tagged
/// name's readers at `::readers`; the fencing counter stays.
#[tokio::test]
async fn inspect_and_force_unlock_follow_the_layout() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "{keys:board}:scores";
    let rwlock = redlock
        .new_rwlock(name)
        .with_expiry(Duration::from_secs(10))
        .with_tries(1);
    let writer = rwlock
        .clone()
        .with_fencing(true)
        .write()
        .await
        .expect("free");
    writer.unlock().await.expect("unlock");
    let _reader = rwlock.read().await.expect("free");
    assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
    let state = rwlock.inspect().await.expect("inspected");
    assert!(matches!(
        state.holder(),
        Some(redmutex::Holder::Readers { count: 1, .. })
    ));
    assert!(
        state
            .nodes()
            .iter()
            .all(|node| node.writer_waiting.is_some())
    );
    assert_eq!(rwlock.force_unlock().await.expect("forced"), 3);
    for suffix in [":readers", ":writer-waiting"] {
        let key = beside(name, suffix);
        assert!(key.contains("}:scores::"), "{key}");
        assert!(!cluster.node(0).exists(&key), "{key}");
    }
    assert!(everywhere(&cluster, "{keys:board}:scores::fence"));
}
