//! Least-privilege users: the README's `ACL SETUSER` rule, taken from the README itself, runs every
//! feature; a user missing one permission gets per-node errors that name it, at once; a wrong
//! password shows neither in errors nor in traces.

use std::time::{Duration, Instant};

use redmutex::{Error, KeepAliveEnd, Mutex, NodeErrorKind, Redlock};
use redmutex_testenv::Cluster;

use crate::support;
use crate::support::capture::Capture;
use crate::support::holders;

const README: &str = include_str!("../../README.md");
const USER: &str = "redmutex";
const PASSWORD: &str = "acl-test-pw-7c1e";

/// The rules of the README's `ACL SETUSER redmutex ...` line, with the test's password.
fn readme_rule() -> Vec<String> {
    let line = README
        .lines()
        .find(|line| line.starts_with("ACL SETUSER redmutex "))
        .expect("the README gives the ACL rule");
    let rules: Vec<String> = line
        .split_whitespace()
        .skip(3)
        .map(|rule| rule.replace(">CHANGE-ME", &format!(">{PASSWORD}")))
        .collect();
    assert!(rules.contains(&format!(">{PASSWORD}")), "{line}");
    rules
}

/// A cluster whose nodes have the user with `rules`, and a client that logs in as that user.
async fn cluster_with(rules: &[String]) -> (Cluster, Redlock) {
    let cluster = Cluster::start(3);
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    for node in cluster.nodes() {
        node.acl_setuser(USER, &rules);
    }
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| url.replace("redis://", &format!("redis://{USER}:{PASSWORD}@")))
        .collect();
    let redlock = Redlock::connect(urls).await.expect("URLs parse");
    (cluster, redlock)
}

/// A 1 s node timeout; `lock()` would retry for seconds at its default 32 tries.
fn mutex(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_expiry(Duration::from_secs(20))
        .with_timeout_factor(0.05)
}

const NODE_TIMEOUT: Duration = Duration::from_secs(1);

#[tokio::test]
async fn the_readme_rule_runs_every_feature() {
    let (cluster, redlock) = cluster_with(&readme_rule()).await;
    let mutex = mutex(&redlock, "lock:acl-all");

    let lock = mutex.lock().await.expect("lock");
    assert_eq!(holders(&cluster, "lock:acl-all", lock.value()), [0, 1, 2]);
    assert!(matches!(mutex.try_lock().await, Err(Error::Taken { .. })));
    lock.extend().await.expect("extend");
    let keep = lock.keep_alive(Duration::from_millis(50)).max_extensions(2);
    assert!(matches!(keep.ended().await, KeepAliveEnd::LimitReached));
    lock.unlock().await.expect("unlock");
    let lock = mutex.try_lock().await.expect("try_lock");
    lock.unlock().await.expect("unlock");

    let fenced = mutex.clone().with_fencing(true);
    let first = fenced.lock().await.expect("fenced lock");
    let token = first.token().expect("a token");
    first.unlock().await.expect("unlock");
    let second = fenced.lock().await.expect("fenced lock");
    assert!(second.token() > Some(token));
    second.unlock().await.expect("unlock");

    // Wake-up on release: the waiter's retry delay is a minute, so only the notice wakes it.
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
    let channel = "redmutex:released:lock:acl-all";
    support::eventually("the waiter subscribed", || {
        cluster.nodes().iter().all(|n| n.subscribers(channel) == 1)
    })
    .await;
    holder.unlock().await.expect("unlock publishes");
    let next = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release")
        .expect("task ran")
        .expect("lock");
    next.unlock().await.expect("unlock");

    // Every connection of the client ran as the restricted user.
    for node in cluster.nodes() {
        for client in node.clients() {
            assert_eq!(client.user, USER, "{client:?}");
        }
    }
}

#[tokio::test]
async fn the_readme_rule_runs_every_primitive() {
    let (cluster, redlock) = cluster_with(&readme_rule()).await;

    // A fair line: the waiter is handed the lock by the release (its retry delay is a minute).
    let fair = mutex(&redlock, "lock:acl-fair")
        .with_fair(true)
        .with_retry_delay(Duration::from_secs(60))
        .with_tries(10);
    let holder = fair.lock().await.expect("fair lock");
    let waiter = {
        let fair = fair.clone();
        tokio::spawn(async move { fair.lock().await })
    };
    support::eventually("the waiter stands in line", || {
        cluster
            .nodes()
            .iter()
            .all(|n| n.exists("{lock:acl-fair}:line"))
    })
    .await;
    holder.unlock().await.expect("fair unlock hands over");
    let next = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("handed the lock")
        .expect("task ran")
        .expect("fair lock");
    next.extend().await.expect("fair extend");
    next.unlock().await.expect("fair unlock");

    let both = redlock
        .new_multi_mutex(["lock:acl-a", "lock:acl-b"])
        .with_expiry(Duration::from_secs(20))
        .with_fencing(true)
        .with_wake_on_release(true);
    let lock = both.lock().await.expect("multi-name lock");
    assert!(lock.token().is_some());
    lock.extend().await.expect("multi-name extend");
    lock.unlock().await.expect("multi-name unlock");
    // Unfenced, the names are set by one MULTI/EXEC of plain SETs, not by a script.
    let plain = redlock
        .new_multi_mutex(["lock:acl-c", "lock:acl-d"])
        .with_expiry(Duration::from_secs(20));
    let lock = plain.lock().await.expect("unfenced multi-name lock");
    lock.unlock().await.expect("unfenced multi-name unlock");

    let rwlock = redlock
        .new_rwlock("lock:acl-rw")
        .with_expiry(Duration::from_secs(20))
        .with_tries(3)
        .with_wake_on_release(true);
    let readers = [rwlock.read().await, rwlock.read().await].map(|r| r.expect("read"));
    assert!(matches!(rwlock.try_write().await, Err(Error::Taken { .. })));
    assert!(rwlock.inspect().await.expect("read inspect").is_held());
    for reader in readers {
        reader.extend().await.expect("read extend");
        reader.unlock().await.expect("read unlock");
    }
    let writer = rwlock.write().await.expect("write");
    writer.unlock().await.expect("write unlock");

    let semaphore = redlock
        .new_semaphore("lock:acl-permits", 2)
        .with_expiry(Duration::from_secs(20))
        .with_tries(1)
        .with_wake_on_release(true);
    let permits =
        [semaphore.acquire().await, semaphore.acquire().await].map(|p| p.expect("permit"));
    assert!(matches!(
        semaphore.try_acquire().await,
        Err(Error::Taken { .. })
    ));
    assert!(semaphore.inspect().await.expect("inspect").is_held());
    for permit in permits {
        permit.extend().await.expect("permit extend");
        permit.unlock().await.expect("permit unlock");
    }

    // The operator's calls.
    let stuck = mutex(&redlock, "lock:acl-stuck");
    let _held = stuck.lock().await.expect("lock");
    assert!(stuck.inspect().await.expect("inspect").is_held());
    assert_eq!(stuck.force_unlock().await.expect("force_unlock"), 3);
    let _reader = rwlock.read().await.expect("read");
    assert_eq!(rwlock.force_unlock().await.expect("force_unlock"), 3);
    let _permit = semaphore.acquire().await.expect("permit");
    assert_eq!(semaphore.force_unlock().await.expect("force_unlock"), 3);
}

/// Every command the library's scripts run is in the README's rule: Redis checks each against the
/// user's permissions, so a script that starts using one more command needs the rule to grow.
#[test]
fn the_readme_rule_allows_every_command_the_scripts_run() {
    let scripts: Vec<&str> = redmutex::internals::script_texts().collect();
    let rule = readme_rule();
    let mut commands = Vec::new();
    for source in scripts {
        for call in ["redis.call('", "redis.pcall('"] {
            for (at, _) in source.match_indices(call) {
                let rest = &source[at + call.len()..];
                let command = &rest[..rest.find('\'').expect("a quoted command")];
                commands.push(command.to_lowercase());
            }
        }
    }
    commands.sort();
    commands.dedup();
    assert!(commands.len() > 15, "{commands:?}");
    for command in commands {
        assert!(
            rule.contains(&format!("+{command}")),
            "the README's ACL rule lacks +{command}"
        );
    }
}

/// The per-node errors of `result`, which must be `NoQuorum` over every node.
fn refusals(result: Result<impl std::fmt::Debug, Error>) -> Vec<String> {
    match result {
        Err(Error::NoQuorum { failures, .. }) => {
            assert_eq!(failures.len(), 3, "{failures:?}");
            failures
                .iter()
                .map(|failure| {
                    assert!(failure.kind.is_refusal(), "{failure}");
                    failure.kind.to_string()
                })
                .collect()
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
}

/// The README's rule without `permission`.
fn rule_without(permission: &str) -> Vec<String> {
    let rules = readme_rule();
    assert!(rules.iter().any(|rule| rule == permission), "{permission}");
    rules
        .into_iter()
        .filter(|rule| rule != permission)
        .collect()
}

#[tokio::test]
async fn without_set_lock_fails_at_once_naming_it() {
    let (_cluster, redlock) = cluster_with(&rule_without("+set")).await;
    let mutex = mutex(&redlock, "lock:acl-no-set");
    let started = Instant::now();
    let result = mutex.lock().await;
    let elapsed = started.elapsed();
    for message in refusals(result) {
        assert!(message.contains("'set'"), "{message}");
        assert!(!message.contains(PASSWORD));
    }
    // 32 tries with 50-250 ms between them would take seconds: one attempt was made.
    assert!(elapsed < NODE_TIMEOUT, "{elapsed:?}");
}

#[tokio::test]
async fn without_a_command_that_the_scripts_run_unlock_fails_naming_it() {
    for (permission, command) in [("+evalsha", "'evalsha'"), ("+del", "'DEL'")] {
        let (cluster, redlock) = cluster_with(&rule_without(permission)).await;
        let mutex = mutex(&redlock, "lock:acl-no-script");
        let lock = mutex.lock().await.expect("SET is allowed");
        let started = Instant::now();
        let result = lock.unlock().await;
        assert!(started.elapsed() < NODE_TIMEOUT);
        for message in refusals(result) {
            assert!(message.contains(command), "{permission}: {message}");
        }
        drop(cluster);
    }
}

/// A user who may not run `MULTI` (a rule from before multi-name locks sent one): the node runs
/// the `SET`s one by one and refuses the `EXEC`, so it must count as a refusal naming `multi`, and
/// the failed attempt's release must take back what the bare `SET`s set.
#[tokio::test]
async fn without_multi_an_unfenced_multi_name_lock_is_refused_and_leaves_nothing() {
    let rule: Vec<String> = rule_without("+multi");
    let (cluster, redlock) = cluster_with(&rule).await;
    let names = ["lock:acl-m1", "lock:acl-m2"];
    let multi = redlock
        .new_multi_mutex(names)
        .with_expiry(Duration::from_secs(60))
        .with_timeout_factor(0.05);
    for message in refusals(multi.lock().await) {
        assert!(message.contains("'multi'"), "{message}");
    }
    support::eventually("the bare SETs are released", || {
        cluster
            .nodes()
            .iter()
            .all(|node| names.iter().all(|name| !node.exists(name)))
    })
    .await;
}

#[tokio::test]
async fn without_the_channel_the_release_names_it() {
    let channels = "&redmutex:released:lock:*";
    let (_cluster, redlock) = cluster_with(&rule_without(channels)).await;
    let mutex = mutex(&redlock, "lock:acl-no-channel").with_wake_on_release(true);
    let lock = mutex.lock().await.expect("SET is allowed");
    // Somebody waits: the release publishes.
    support::mark_waited(&_cluster, mutex.name());
    for message in refusals(lock.unlock().await) {
        assert!(message.contains("channel"), "{message}");
        assert!(message.contains("'PUBLISH'"), "{message}");
    }
}

#[tokio::test]
async fn a_wrong_password_shows_nowhere() {
    let (cluster, _) = cluster_with(&readme_rule()).await;
    let wrong = "wr0ng-pa55word-e9d2";
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| url.replace("redis://", &format!("redis://{USER}:{wrong}@")))
        .collect();

    let capture = Capture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer({
            let capture = capture.clone();
            move || capture.clone()
        })
        .finish();
    let _guard = support::capture::set_default(subscriber);

    let redlock = Redlock::connect(&urls).await.expect("URLs parse");
    let mutex = mutex(&redlock, "lock:acl-wrong-password");
    let started = Instant::now();
    let error = mutex.lock().await.expect_err("the password is refused");
    assert!(started.elapsed() < NODE_TIMEOUT, "refusals are not retried");
    let Error::NoQuorum { failures, .. } = &error else {
        panic!("expected NoQuorum, got {error:?}");
    };
    assert!(
        failures
            .iter()
            .all(|f| matches!(f.kind, NodeErrorKind::Redis(_)) && f.kind.is_refusal()),
        "{failures:?}"
    );
    for text in [
        error.to_string(),
        format!("{error:?}"),
        format!("{redlock:?}"),
    ] {
        assert!(!text.contains(wrong), "{text}");
    }
    let traces = capture.text();
    assert!(traces.contains("node connection failed"), "{traces}");
    assert!(!traces.contains(wrong), "{traces}");
}
