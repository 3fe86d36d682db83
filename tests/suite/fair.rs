//! Fair waiting (`Mutex::with_fair`): one line per name across clients, served in the order the
//! waiters joined it, through crashes and node faults, and still mutually exclusive.

use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redmutex::{Error, Mutex, Redlock};
use redmutex_testenv::{Cluster, Mode};

use crate::support;
use crate::support::history::History;
use crate::support::{client, eventually, present};

/// A fair mutex with a 2 s expiry (renewals every 0.67 s), a generous node timeout, and tries
/// enough to wait in line for a while (the retry delays add up to the time in line).
fn fair(redlock: &Redlock, name: &str) -> Mutex {
    redlock
        .new_mutex(name)
        .with_fair(true)
        .with_expiry(Duration::from_secs(2))
        .with_timeout_factor(0.25)
        .with_retry_delay(Duration::from_millis(50))
        .with_tries(400)
}

/// The order in which the waiters got the lock, filled by `serve`.
type Order = Arc<StdMutex<Vec<usize>>>;

/// Waiter `i`: takes the lock, notes its turn in `order` and in `history`, holds it for `hold`.
fn serve(
    i: usize,
    mutex: Mutex,
    hold: Duration,
    order: &Order,
    history: &Arc<History>,
) -> tokio::task::JoinHandle<()> {
    let (order, history) = (Arc::clone(order), Arc::clone(history));
    tokio::spawn(async move {
        let lock = mutex.lock().await.expect("served in line");
        let from = Instant::now();
        order.lock().expect("not poisoned").push(i);
        tokio::time::sleep(hold).await;
        let until = Instant::now();
        history.record(&i.to_string(), from, until, lock.valid_until());
        lock.unlock().await.expect("unlock");
    })
}

/// Whether `name`'s line on `node` has an entry for anybody.
fn line_len(cluster: &Cluster, node: usize, name: &str) -> i64 {
    let mut connection = cluster.node(node).connection();
    redis::cmd("ZCARD")
        .arg(support::beside(name, ":line"))
        .query(&mut connection)
        .expect("ZCARD")
}

/// Eight clients, one waiter each, joining one after the other while the lock is held (each once
/// the one before stands in line on every node): they get it in the order they joined, every time.
#[tokio::test]
async fn waiters_of_many_clients_are_served_in_join_order() {
    let cluster = Cluster::start(5);
    let holder = client(&cluster).await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(client(&cluster).await);
    }
    for round in 0..20 {
        let name = format!("fair:order:{round}");
        let held = fair(&holder, &name).lock().await.expect("free lock");
        let (order, history) = (Order::default(), Arc::new(History::new()));
        let mut waiters = Vec::new();
        for (i, redlock) in clients.iter().enumerate() {
            let mutex = fair(redlock, &name);
            waiters.push(serve(i, mutex, Duration::from_millis(2), &order, &history));
            // A fixed pause here let a loaded machine reorder the joins themselves.
            let joined = i as i64 + 1;
            eventually("the waiter stands in line on every node", || {
                (0..5).all(|node| line_len(&cluster, node, &name) == joined)
            })
            .await;
        }
        held.unlock().await.expect("unlock");
        for waiter in waiters {
            waiter.await.expect("waiter finished");
        }
        assert_eq!(
            *order.lock().expect("not poisoned"),
            (0..8).collect::<Vec<_>>(),
            "round {round}"
        );
        history.assert_exclusive();
        assert!(present(&cluster, &name).is_empty(), "round {round}");
    }
}

/// A release hands the lock to the head of the line without a round trip of the waiter's: the
/// nodes see one round to join and one release per waiter, nothing more.
#[tokio::test]
async fn a_hand_off_costs_the_waiter_no_round_trip() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster).await;
    let waiter = client(&cluster).await;
    let name = "fair:cost";
    for round in 0..2 {
        let held = fair(&holder, name).lock().await.expect("free lock");
        let before = cluster.node(0).calls("evalsha");
        let next = tokio::spawn({
            let mutex = fair(&waiter, name);
            async move { mutex.lock().await }
        });
        eventually("the waiter joined", || line_len(&cluster, 0, name) == 1).await;
        // The first wait of a client on a name subscribes to its notices and then makes one more
        // round, for a hand-off that came before the subscription; the name stays subscribed.
        tokio::time::sleep(Duration::from_millis(50)).await;
        held.unlock().await.expect("unlock");
        let next = next.await.expect("no panic").expect("handed over");
        assert!(next.valid_until() > Instant::now());
        let calls = cluster.node(0).calls("evalsha") - before;
        next.unlock().await.expect("unlock");
        if round == 1 {
            // Node 0 saw the waiter's round (it joined there) and the holder's release.
            assert_eq!(calls, 2);
        }
    }
    assert!(present(&cluster, name).is_empty());
}

/// The head of the line crashes: its renewals stop and its cleanup never arrives. The lock is
/// handed to it on release, and once its entry expires the next waiter gets it; the rest keep
/// their order.
#[tokio::test]
async fn a_crashed_head_is_passed_over_once_its_place_expires() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster).await;
    let name = "fair:crash";
    let held = fair(&holder, name).lock().await.expect("free lock");

    // The waiter that will crash reaches the nodes through proxies, so its crash can take its
    // cleanup with it.
    let proxies = cluster.proxies();
    let doomed = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    let crashed = tokio::spawn({
        let mutex = fair(&doomed, name);
        async move { mutex.lock().await }
    });
    eventually("the doomed waiter joined", || {
        line_len(&cluster, 0, name) == 1
    })
    .await;
    let (order, history) = (Order::default(), Arc::new(History::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let mutex = fair(&client(&cluster).await, name);
        waiters.push(serve(i, mutex, Duration::from_millis(2), &order, &history));
        let joined = i as i64 + 2;
        eventually("joined", || line_len(&cluster, 0, name) == joined).await;
    }
    proxies.set_mode(&[0, 1, 2], Mode::Blackhole);
    crashed.abort();
    let crash = Instant::now();
    held.unlock().await.expect("unlock");
    for waiter in waiters {
        waiter.await.expect("waiter finished");
    }
    let passed_over = crash.elapsed();
    assert_eq!(*order.lock().expect("not poisoned"), [0, 1, 2]);
    history.assert_exclusive();
    // The crashed waiter's place lived at most one expiry; the next waiter's renewal (a third of
    // an expiry) found the lock free.
    assert!(
        passed_over < Duration::from_secs(4),
        "passed over after {passed_over:?}"
    );
    drop(proxies);
}

/// A holder that vanishes leaves the key to expire while a waiter stands in line, and a newcomer
/// whose client never waited for the name tries a plain `SET NX` first. The key is free, so the
/// `SET` succeeds on every node; the `EXISTS` behind it finds the line, so the newcomer hands the
/// key to the head and joins behind it, long before the head's own renewal would have found the
/// key free.
#[tokio::test]
async fn a_newcomer_leaves_a_free_lock_to_the_line() {
    let cluster = Cluster::start(3);
    let name = "fair:newcomer";
    let holder = client(&cluster).await;
    let held = fair(&holder, name)
        .with_expiry(Duration::from_millis(600))
        .lock()
        .await
        .expect("free lock");
    let (order, history) = (Order::default(), Arc::new(History::new()));
    // The head renews its place every 2 s, well after the holder's key expired.
    let head = fair(&client(&cluster).await, name).with_expiry(Duration::from_secs(6));
    let head = serve(0, head, Duration::from_millis(20), &order, &history);
    eventually("the head joined", || {
        (0..3).all(|node| line_len(&cluster, node, name) == 1)
    })
    .await;
    // The holder vanishes without a release.
    std::mem::forget(held);
    eventually("the holder's key expired", || {
        present(&cluster, name).is_empty()
    })
    .await;
    assert!(
        order.lock().expect("not poisoned").is_empty(),
        "nobody served yet"
    );

    let newcomer = client(&cluster).await;
    let sets = cluster.node(0).calls("set");
    let newcomer = serve(
        1,
        fair(&newcomer, name),
        Duration::from_millis(20),
        &order,
        &history,
    );
    newcomer.await.expect("newcomer finished");
    head.await.expect("head finished");
    assert_eq!(*order.lock().expect("not poisoned"), [0, 1]);
    history.assert_exclusive();
    assert!(
        cluster.node(0).calls("set") > sets,
        "the newcomer's first try was a plain SET"
    );
    assert!(present(&cluster, name).is_empty());
}

/// While nobody waits, a fair lock costs what a plain one does on the nodes: `SET NX` (with an
/// `EXISTS` in the same write) to lock, one script to unlock; no script to lock.
#[tokio::test]
async fn an_uncontended_fair_lock_sends_no_script_to_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let mutex = fair(&redlock, "fair:uncontended");
    let node = cluster.node(0);
    for _ in 0..3 {
        let (evalsha, sets, exists) = (
            node.calls("evalsha"),
            node.calls("set"),
            node.calls("exists"),
        );
        let lock = mutex.lock().await.expect("free lock");
        assert_eq!(node.calls("evalsha"), evalsha, "no script to lock");
        assert_eq!(node.calls("set"), sets + 1);
        assert_eq!(node.calls("exists"), exists + 1);
        lock.unlock().await.expect("unlock");
        assert_eq!(node.calls("evalsha"), evalsha + 1, "one script to unlock");
    }
}

/// A hand-off published while the waiter's client is still subscribing to the name is lost:
/// pub/sub keeps nothing. So every fair waiter that joined while the subscription was on its way
/// makes a round once it is in place, and finds the lock handed to it then; not only the call that
/// started the subscription (here a plain waiter of the same client), and not at its renewal, a
/// third of the expiry later.
#[tokio::test]
async fn a_hand_off_before_the_client_listens_is_found_at_once() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster).await;
    // The waiters' client reaches every node with 200 ms each way, so its subscription is in place
    // only well after its waiter stood in line.
    let proxies = cluster.proxies();
    let slow = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    let warm = slow
        .new_mutex("fair:unheard:warm-up")
        .lock()
        .await
        .expect("lock");
    warm.unlock().await.expect("unlock");
    proxies.set_mode(&[0, 1, 2], Mode::Delay(Duration::from_millis(200)));
    let name = "fair:unheard";
    let patient = |mutex: Mutex| {
        mutex
            .with_expiry(Duration::from_secs(9))
            .with_timeout_factor(0.15)
            .with_retry_delay(Duration::from_secs(10))
            .with_tries(3)
    };
    let held = patient(holder.new_mutex(name).with_fair(true))
        .lock()
        .await
        .expect("free lock");
    let plain = patient(slow.new_mutex(name).with_wake_on_release(true));
    let plain = tokio::spawn(async move { plain.lock().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let fair = patient(slow.new_mutex(name).with_fair(true));
    let fair = tokio::spawn(async move { fair.lock().await });
    eventually("the fair waiter stands in line", || {
        (0..3).all(|node| line_len(&cluster, node, name) == 1)
    })
    .await;
    let released = Instant::now();
    held.unlock().await.expect("unlock hands the lock over");
    let lock = tokio::time::timeout(Duration::from_secs(10), fair)
        .await
        .expect("served at last")
        .expect("task ran")
        .expect("fair lock");
    let served = released.elapsed();
    // Its renewal would have come 3 s after it joined.
    assert!(
        served < Duration::from_secs(2),
        "served {served:?} after the release"
    );
    lock.unlock().await.expect("unlock");
    plain.abort();
}

/// Waiters in line while a node is killed (and restarted later than the expiry, as Redlock
/// requires) and another is paused: served in join order, never two at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_line_keeps_its_order_through_node_faults() {
    let cluster = Arc::new(Cluster::start(5));
    let name = "fair:faults";
    let holder = client(&cluster).await;
    let held = fair(&holder, name).lock().await.expect("free lock");
    let (order, history) = (Order::default(), Arc::new(History::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        let mutex = fair(&client(&cluster).await, name);
        waiters.push(serve(
            i,
            mutex,
            Duration::from_millis(300),
            &order,
            &history,
        ));
        let joined = i as i64 + 1;
        eventually("joined", || line_len(&cluster, 2, name) == joined).await;
    }
    cluster.node(0).kill();
    let restart = cluster.node(0).restart_after(Duration::from_millis(2500));
    held.unlock().await.expect("unlock");
    tokio::time::sleep(Duration::from_millis(400)).await;
    cluster.node(1).pause();
    tokio::time::sleep(Duration::from_millis(600)).await;
    cluster.node(1).resume();
    for waiter in waiters {
        waiter.await.expect("waiter finished");
    }
    assert!(restart.wait(), "node 0 restarted");
    assert_eq!(
        *order.lock().expect("not poisoned"),
        (0..6).collect::<Vec<_>>()
    );
    history.assert_exclusive();
}

/// Clients that all find the name free at once split the nodes between them (each takes the free
/// key on the nodes it reaches first). The waiters holding keys out of turn pass them to the first
/// in line, so one of them gets the lock, every time, and the rest follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_lockers_of_a_free_name_never_deadlock() {
    let cluster = Cluster::start(5);
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(client(&cluster).await);
    }
    for round in 0..10 {
        let name = format!("fair:split:{round}");
        let history = Arc::new(History::new());
        let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
        let mut lockers = Vec::new();
        for (i, redlock) in clients.iter().enumerate() {
            let (mutex, start) = (fair(redlock, &name), Arc::clone(&start));
            let history = Arc::clone(&history);
            lockers.push(tokio::spawn(async move {
                start.wait().await;
                let lock = mutex.lock().await.expect("served in line");
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(2)).await;
                history.record(&i.to_string(), from, Instant::now(), lock.valid_until());
                lock.unlock().await.expect("unlock");
            }));
        }
        let all = futures::future::join_all(lockers);
        let served = tokio::time::timeout(Duration::from_secs(20), all).await;
        assert!(served.is_ok(), "round {round}: the lockers deadlocked");
        assert_eq!(history.len(), clients.len());
        history.assert_exclusive();
        assert!(present(&cluster, &name).is_empty(), "round {round}");
    }
}

/// Fair and plain mutexes on one name exclude each other both ways, and under contention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_and_plain_mutexes_on_one_name_exclude_each_other() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "fair:mixed";
    let plain = support::contended(&redlock, name);
    let fair = fair(&redlock, name);

    let held = fair.lock().await.expect("free lock");
    assert!(matches!(plain.try_lock().await, Err(Error::Taken { .. })));
    held.unlock().await.expect("unlock");
    let held = plain.lock().await.expect("free lock");
    assert!(matches!(fair.try_lock().await, Err(Error::Taken { .. })));
    held.unlock().await.expect("unlock");

    let history = Arc::new(History::new());
    let mut tasks = Vec::new();
    for task in 0..8 {
        let mutex = if task % 2 == 0 {
            fair.clone()
        } else {
            plain.clone()
        };
        let history = Arc::clone(&history);
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let lock = mutex.lock().await.expect("lock under contention");
                let from = Instant::now();
                tokio::time::sleep(Duration::from_millis(1)).await;
                history.record(&task.to_string(), from, Instant::now(), lock.valid_until());
                lock.unlock().await.expect("unlock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task finished");
    }
    assert_eq!(history.len(), 80);
    history.assert_exclusive();
}

/// 8 tasks on each of 4 clients make 25 non-atomic increments each under a fair lock: none is lost,
/// and no two critical sections overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_increments_are_never_lost() {
    let cluster = Cluster::start(5);
    let counter = Cluster::start(1);
    let history = Arc::new(History::new());
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let redlock = client(&cluster).await;
        for _ in 0..8 {
            let mutex = fair(&redlock, "fair:counter").with_tries(100_000);
            let url = counter.node(0).url();
            let history = Arc::clone(&history);
            let task = tasks.len();
            tasks.push(tokio::spawn(async move {
                let mut store = redis::Client::open(url)
                    .expect("valid URL")
                    .get_multiplexed_async_connection()
                    .await
                    .expect("counter node is up");
                for _ in 0..25 {
                    let lock = mutex.lock().await.expect("served in line");
                    let from = Instant::now();
                    let value: Option<u64> = store.get("count").await.expect("GET");
                    tokio::task::yield_now().await; // widen the race window
                    let _: () = store
                        .set("count", value.unwrap_or(0) + 1)
                        .await
                        .expect("SET");
                    history.record(&task.to_string(), from, Instant::now(), lock.valid_until());
                    lock.unlock().await.expect("unlock");
                }
            }));
        }
    }
    for task in tasks {
        task.await.expect("task finished");
    }
    assert_eq!(counter.node(0).get("count").as_deref(), Some("800"));
    history.assert_exclusive();
}

/// A waiter that gives up (its time in line is over), one that makes a single attempt, and one
/// whose call is dropped all leave the line: nothing of theirs is left on any node.
#[tokio::test]
async fn waiters_that_stop_waiting_leave_the_line() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let name = "fair:leave";
    let held = fair(&redlock, name).lock().await.expect("free lock");

    let impatient = fair(&redlock, name).with_tries(3);
    let started = Instant::now();
    assert!(matches!(impatient.lock().await, Err(Error::Taken { .. })));
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(matches!(
        fair(&redlock, name).try_lock().await,
        Err(Error::Taken { .. })
    ));
    let cancelled = tokio::spawn({
        let mutex = fair(&redlock, name);
        async move { mutex.lock().await }
    });
    eventually("the waiter joined", || line_len(&cluster, 0, name) == 1).await;
    cancelled.abort();
    eventually("every waiter left", || {
        (0..3).all(|node| line_len(&cluster, node, name) == 0)
    })
    .await;
    held.unlock().await.expect("unlock");
    assert!(present(&cluster, name).is_empty());
}

/// Fair waiting and fencing do not combine yet: a clear configuration error, before any I/O.
#[tokio::test]
async fn fair_with_fencing_is_a_configuration_error() {
    let redlock = Redlock::connect(["redis://127.0.0.1:1/"])
        .await
        .expect("URL parses");
    let mutex = redlock
        .new_mutex("fair:fenced")
        .with_fair(true)
        .with_fencing(true);
    assert!(matches!(
        mutex.lock().await,
        Err(Error::Config { field, .. }) if field == "fair"
    ));
}

/// `name`'s line on `node`: each waiter's value and ticket, first in line first.
fn line_entries(cluster: &Cluster, node: usize, name: &str) -> Vec<(String, u64)> {
    let mut connection = cluster.node(node).connection();
    redis::cmd("ZRANGE")
        .arg(support::beside(name, ":line"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut connection)
        .expect("ZRANGE")
}

/// Runs `command` on nodes `nodes`, as an operator (or an eviction) would.
fn on_nodes(cluster: &Cluster, nodes: impl IntoIterator<Item = usize>, command: &redis::Cmd) {
    for node in nodes {
        let mut connection = cluster.node(node).connection();
        let _: redis::Value = command.query(&mut connection).expect("command runs");
    }
}

/// Lets waiters `0..count` from fresh clients join `name`'s line one after the other, each once
/// it stands on every node.
async fn join_in_turn(
    cluster: &Cluster,
    name: &str,
    count: usize,
    order: &Order,
    history: &Arc<History>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let before = line_len(cluster, 0, name);
    let mut waiters = Vec::new();
    for i in 0..count {
        let mutex = fair(&client(cluster).await, name);
        waiters.push(serve(i, mutex, Duration::from_millis(2), order, history));
        let joined = before + i as i64 + 1;
        eventually("joined", || {
            (0..cluster.len()).all(|node| line_len(cluster, node, name) == joined)
        })
        .await;
    }
    waiters
}

/// Waits for `waiters`, generously: a line that jams never serves them.
async fn all_served(waiters: Vec<tokio::task::JoinHandle<()>>) {
    let all = futures::future::join_all(waiters);
    let served = tokio::time::timeout(Duration::from_secs(15), all)
        .await
        .expect("every waiter served: the line jammed");
    for waiter in served {
        waiter.expect("waiter finished");
    }
}

/// The case: a waiter stands in line but its deadline is gone (an eviction of
/// `<name>:line:until`, or a hand-made `ZREM`), and then its client crashes, so nothing renews or
/// removes its place. A missing deadline reads as expired: the release passes it over and hands
/// the lock to the next waiter, and the line goes on in order.
#[tokio::test]
async fn a_waiter_without_a_deadline_is_passed_over() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster).await;
    let name = "fair:no-deadline";
    let held = fair(&holder, name).lock().await.expect("free lock");
    let proxies = cluster.proxies();
    let doomed = Redlock::connect(proxies.urls()).await.expect("URLs parse");
    let crashed = tokio::spawn({
        let mutex = fair(&doomed, name);
        async move { mutex.lock().await }
    });
    eventually("the doomed waiter joined", || {
        (0..3).all(|node| line_len(&cluster, node, name) == 1)
    })
    .await;
    let (order, history) = (Order::default(), Arc::new(History::new()));
    let waiters = join_in_turn(&cluster, name, 3, &order, &history).await;
    proxies.set_mode(&[0, 1, 2], Mode::Blackhole);
    crashed.abort();
    let (ghost, _) = line_entries(&cluster, 0, name).remove(0);
    let forget = redis::cmd("ZREM")
        .arg(support::beside(name, ":line:until"))
        .arg(&ghost)
        .clone();
    on_nodes(&cluster, 0..3, &forget);

    held.unlock().await.expect("the release hands the lock on");
    all_served(waiters).await;
    assert_eq!(*order.lock().expect("not poisoned"), [0, 1, 2]);
    history.assert_exclusive();
    // A later release on the same line works too.
    let held = fair(&holder, name).lock().await.expect("free lock");
    held.unlock().await.expect("a later release");
    eventually("the line is gone", || {
        (0..3).all(|node| line_len(&cluster, node, name) == 0)
    })
    .await;
    drop(proxies);
}

/// The ticket counter is gone (evicted, deleted) while waiters stand in line: a newcomer still
/// gets a ticket behind theirs, never one of the tickets already given.
#[tokio::test]
async fn a_newcomer_after_the_counter_was_lost_joins_behind_the_line() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster).await;
    let name = "fair:no-counter";
    let held = fair(&holder, name).lock().await.expect("free lock");
    let (order, history) = (Order::default(), Arc::new(History::new()));
    let mut waiters = join_in_turn(&cluster, name, 2, &order, &history).await;
    // Each waiter's client makes one more round once its subscription is in place (see
    // `a_hand_off_before_the_client_listens_is_found_at_once`); after that, none renews for a
    // third of the expiry.
    let channel = format!("redmutex:released:{name}");
    eventually("the waiters' clients listen", || {
        (0..3).all(|node| cluster.node(node).subscribers(&channel) == 2)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    on_nodes(
        &cluster,
        0..3,
        redis::cmd("DEL").arg(support::beside(name, ":ticket")),
    );
    let newcomer = fair(&client(&cluster).await, name);
    waiters.push(serve(
        2,
        newcomer,
        Duration::from_millis(2),
        &order,
        &history,
    ));
    eventually("the newcomer joined", || {
        (0..3).all(|node| line_len(&cluster, node, name) == 3)
    })
    .await;
    held.unlock().await.expect("unlock");
    all_served(waiters).await;
    assert_eq!(*order.lock().expect("not poisoned"), [0, 1, 2]);
    history.assert_exclusive();
}

/// What a load phase of [`the_line_survives_each_of_its_keys_deleted_under_load`] saw.
#[derive(Default)]
struct Phase {
    /// Releases that failed, and how.
    failed_releases: Vec<String>,
    /// How many times the vandal deleted its key.
    deletions: usize,
}

impl Phase {
    fn assert_releases_succeeded(&self, key: &str) {
        assert!(
            self.failed_releases.is_empty(),
            "deleting {key}: {} releases failed, the first with {}",
            self.failed_releases.len(),
            self.failed_releases[0]
        );
    }
}

/// 4 clients x 2 tasks take the fair lock on `name` 10 times each (holding 2 ms) while `key` is
/// deleted every 15 ms on `nodes` (if any). Every `lock()` must be served.
async fn load_phase(
    cluster: &Arc<Cluster>,
    name: &'static str,
    vandal: Option<(String, std::ops::Range<usize>)>,
    history: &Arc<History>,
) -> Phase {
    let failed = Arc::new(StdMutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let redlock = client(cluster).await;
        for _ in 0..2 {
            let mutex = fair(&redlock, name);
            let (history, failed) = (Arc::clone(history), Arc::clone(&failed));
            let task = tasks.len();
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let lock = mutex.lock().await.expect("served in line");
                    let from = Instant::now();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    history.record(&task.to_string(), from, Instant::now(), lock.valid_until());
                    if let Err(error) = lock.unlock().await {
                        failed
                            .lock()
                            .expect("not poisoned")
                            .push(format!("{error:?}"));
                    }
                }
            }));
        }
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let vandal = tokio::task::spawn_blocking({
        let (cluster, done) = (Arc::clone(cluster), Arc::clone(&done));
        move || {
            let mut deletions = 0;
            let Some((key, nodes)) = vandal else {
                return deletions;
            };
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(15));
                on_nodes(&cluster, nodes.clone(), redis::cmd("DEL").arg(&key));
                deletions += 1;
            }
            deletions
        }
    });
    let all = futures::future::join_all(tasks);
    let finished = tokio::time::timeout(Duration::from_secs(60), all).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let deletions = vandal.await.expect("vandal finished");
    for task in finished.expect("every waiter served: the line jammed") {
        task.expect("task finished");
    }
    let failed_releases = failed.lock().expect("not poisoned").clone();
    Phase {
        failed_releases,
        deletions,
    }
}

/// Several clients' fair waiters take turns while each key of the line (`<name>:line`,
/// `<name>:line:until`, `<name>:ticket`) in turn is deleted again and again on two nodes of
/// three: every waiter is served, every release succeeds, and no two hold at once. Then the lock
/// key itself on one node: every waiter is still served, though a holder whose key goes on a
/// node it needed for its quorum has lost the lock (no lock survives that, so neither releases
/// nor exclusion are checked there). Afterwards the line works as if nothing had happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_line_survives_each_of_its_keys_deleted_under_load() {
    let cluster = Arc::new(Cluster::start(3));
    let name = "fair:vandal";
    for key in ["line", "line:until", "ticket"] {
        let history = Arc::new(History::new());
        let vandal = (format!("{name}:{key}"), 0..2);
        let phase = load_phase(&cluster, name, Some(vandal), &history).await;
        phase.assert_releases_succeeded(key);
        assert!(
            phase.deletions >= 2,
            "{key} deleted {} times",
            phase.deletions
        );
        assert_eq!(history.len(), 80, "{key}");
        history.assert_exclusive();
    }
    let vandal = (name.to_owned(), 0..1);
    let phase = load_phase(&cluster, name, Some(vandal), &Arc::new(History::new())).await;
    assert!(phase.deletions >= 2, "deleted {} times", phase.deletions);
    let history = Arc::new(History::new());
    let phase = load_phase(&cluster, name, None, &history).await;
    phase.assert_releases_succeeded("none");
    assert_eq!(history.len(), 80);
    history.assert_exclusive();
    eventually("nothing is left", || {
        (0..3).all(|node| cluster.node(node).dbsize() == 0)
    })
    .await;
}

/// `PUBLISH`es `payload` on `name`'s notice channel on `node`, as anyone allowed to could;
/// returns how many connections heard it.
fn publish(cluster: &Cluster, node: usize, name: &str, payload: &[u8]) -> i64 {
    let mut connection = cluster.node(node).connection();
    redis::cmd("PUBLISH")
        .arg(format!("redmutex:released:{name}"))
        .arg(payload)
        .query(&mut connection)
        .expect("PUBLISH")
}

/// The fingerprint a grant notice names `value` by, as the node's scripts write it.
fn fingerprint(cluster: &Cluster, value: &str) -> String {
    let mut connection = cluster.node(0).connection();
    redis::cmd("EVAL")
        .arg("return redis.sha1hex(ARGV[1])")
        .arg(0)
        .arg(value)
        .query(&mut connection)
        .expect("EVAL")
}

/// Grant notices that anyone allowed to `PUBLISH` on the nodes could send while the lock is held
/// (see the README's ACL section): one naming another waiter, ones naming a ticket our place does
/// not have or none, and copies of one node's grant published on node 0's connection again and
/// again. None counts: the waiter at most makes a round, which finds the holder's keys, and it
/// gets the lock only once the holder releases it.
#[tokio::test]
async fn forged_grant_notices_do_not_hand_the_lock_over() {
    let cluster = Cluster::start(3);
    let name = "fair:forged";
    let holder = client(&cluster).await;
    let held = fair(&holder, name).lock().await.expect("free lock");
    let held_from = Instant::now();
    let (order, history) = (Order::default(), Arc::new(History::new()));
    let waiter = serve(
        0,
        fair(&client(&cluster).await, name),
        Duration::from_millis(2),
        &order,
        &history,
    );
    eventually("the waiter stands in line and listens", || {
        (0..3).all(|node| {
            line_len(&cluster, node, name) == 1
                && cluster
                    .node(node)
                    .subscribers(&format!("redmutex:released:{name}"))
                    == 1
        })
    })
    .await;
    let (value, ticket) = line_entries(&cluster, 0, name).remove(0);
    let (ours, theirs) = (
        fingerprint(&cluster, &value),
        fingerprint(&cluster, "theirs"),
    );
    let forged = [
        (0..3, format!("\0{theirs} {ticket} {ticket}")),
        (0..3, format!("\0{ours} {ticket} {}", ticket + 1)),
        (0..3, format!("\0{ours} {ticket} {}", ticket - 1)),
        (0..3, format!("\0{ours} {ticket}")),
        (0..1, format!("\0{ours} {ticket} {ticket}")),
        (0..1, format!("\0{ours} {ticket} {ticket}")),
        (0..1, format!("\0{ours} {ticket} {ticket}")),
    ];
    for (nodes, payload) in forged {
        for node in nodes {
            assert_eq!(publish(&cluster, node, name, payload.as_bytes()), 1);
        }
    }
    // Time for the waiter to read them, and for the round that a grant from fewer than a
    // quorum of nodes calls for once a node timeout (500 ms) passed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(order.lock().expect("not poisoned").is_empty(), "not served");
    history.record("holder", held_from, Instant::now(), held.valid_until());
    held.unlock().await.expect("unlock");
    all_served(vec![waiter]).await;
    history.assert_exclusive();
}

/// A notice's ticket counter is a hint for the offer of its client's next joiner. One that no
/// line reaches (2^60, published by hand) is not heard: taken as a hint, it would give that
/// joiner a ticket past what the nodes keep exactly, and the next joiner of another client a
/// place ahead of it.
#[tokio::test]
async fn a_forged_ticket_hint_does_not_reorder_the_line() {
    let cluster = Cluster::start(3);
    let name = "fair:forged-hint";
    let holder = client(&cluster).await;
    let held = fair(&holder, name).lock().await.expect("free lock");
    let (order, history) = (Order::default(), Arc::new(History::new()));
    let heard = client(&cluster).await;
    let first = serve(
        0,
        fair(&heard, name),
        Duration::from_millis(2),
        &order,
        &history,
    );
    eventually("the first waiter stands in line and listens", || {
        (0..3).all(|node| {
            line_len(&cluster, node, name) == 1
                && cluster
                    .node(node)
                    .subscribers(&format!("redmutex:released:{name}"))
                    == 1
        })
    })
    .await;
    let nobody = fingerprint(&cluster, "nobody");
    for node in 0..3 {
        let payload = format!("\0{nobody} {} 1", 1u64 << 60);
        assert_eq!(publish(&cluster, node, name, payload.as_bytes()), 1);
    }
    // Time for the client to read the notices.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut waiters = vec![first];
    waiters.push(serve(
        1,
        fair(&heard, name),
        Duration::from_millis(2),
        &order,
        &history,
    ));
    eventually("the second waiter joined", || {
        (0..3).all(|node| line_len(&cluster, node, name) == 2)
    })
    .await;
    let other = fair(&client(&cluster).await, name);
    waiters.push(serve(2, other, Duration::from_millis(2), &order, &history));
    eventually("the other client's waiter joined", || {
        (0..3).all(|node| line_len(&cluster, node, name) == 3)
    })
    .await;
    // As the node writes them: a score past 2^53 would read "1.152921504606847e+18".
    let tickets: Vec<(String, String)> = redis::cmd("ZRANGE")
        .arg(support::beside(name, ":line"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut cluster.node(0).connection())
        .expect("ZRANGE");
    let tickets: Vec<&str> = tickets.iter().map(|(_, ticket)| ticket.as_str()).collect();
    assert_eq!(tickets, ["1", "2", "3"]);
    held.unlock().await.expect("unlock");
    all_served(waiters).await;
    assert_eq!(*order.lock().expect("not poisoned"), [0, 1, 2]);
    history.assert_exclusive();
}

/// Every grant notice a node published, as `(node, channel, fingerprint of the new holder's
/// value)`, heard by a subscriber of every redmutex channel on each node.
type Heard = Arc<StdMutex<Vec<(usize, String, String)>>>;

/// Subscribes to every redmutex channel on each node of `cluster`, and keeps the grant notices.
async fn hear_grants(cluster: &Cluster) -> Heard {
    use futures::StreamExt;
    let heard = Heard::default();
    for node in 0..cluster.len() {
        let client = redis::Client::open(cluster.node(node).url()).expect("a URL");
        let mut pubsub = client.get_async_pubsub().await.expect("a subscriber");
        pubsub.psubscribe("redmutex:*").await.expect("PSUBSCRIBE");
        let heard = Arc::clone(&heard);
        tokio::spawn(async move {
            let mut messages = pubsub.into_on_message();
            while let Some(message) = messages.next().await {
                let payload = message.get_payload_bytes();
                if let Some(grant) = payload.strip_prefix(b"\0") {
                    let fingerprint = String::from_utf8_lossy(grant);
                    let fingerprint = fingerprint.split(' ').next().unwrap_or("").to_owned();
                    let channel = message.get_channel_name().to_owned();
                    heard
                        .lock()
                        .expect("not poisoned")
                        .push((node, channel, fingerprint));
                }
            }
        });
    }
    heard
}

/// Four clients in line, one waiter each: every hand-off is published once per node, on the
/// channel of the head's client alone, never on the name's channel (which every waiting client
/// hears) nor on another client's; each client hears only the grants to its own waiter, and the
/// line keeps its order.
#[tokio::test]
async fn grants_reach_only_the_head_s_client() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster).await;
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&cluster).await);
    }
    let name = "fair:addressed";
    let heard = hear_grants(&cluster).await;
    let held = fair(&holder, name).lock().await.expect("free lock");
    let values = Arc::new(StdMutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for (i, redlock) in clients.iter().enumerate() {
        let (mutex, values) = (fair(redlock, name), Arc::clone(&values));
        waiters.push(tokio::spawn(async move {
            let lock = mutex.lock().await.expect("served in line");
            values
                .lock()
                .expect("not poisoned")
                .push((i, lock.value().to_owned()));
            tokio::time::sleep(Duration::from_millis(20)).await;
            lock.unlock().await.expect("unlock");
        }));
        let joined = i as i64 + 1;
        eventually("the waiter stands in line on every node", || {
            (0..3).all(|node| line_len(&cluster, node, name) == joined)
        })
        .await;
    }
    held.unlock().await.expect("unlock");
    for waiter in waiters {
        waiter.await.expect("waiter finished");
    }
    let served = values.lock().expect("not poisoned").clone();
    assert_eq!(
        served.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1, 2, 3],
        "served in join order"
    );
    // Every hand-off (to each of the four) was heard from each of the three nodes.
    eventually("every grant was heard", || {
        heard.lock().expect("not poisoned").len() >= 4 * 3
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let heard = heard.lock().expect("not poisoned").clone();
    assert_eq!(
        heard.len(),
        4 * 3,
        "one grant per hand-off and node: {heard:?}"
    );
    let mut channels = Vec::new();
    for (i, value) in &served {
        let fingerprint = fingerprint(&cluster, value);
        let to: Vec<&(usize, String, String)> =
            heard.iter().filter(|(_, _, f)| *f == fingerprint).collect();
        assert_eq!(
            to.len(),
            3,
            "waiter {i}: one grant from each node: {heard:?}"
        );
        let channel = &to[0].1;
        assert!(
            channel.starts_with("redmutex:granted:{fair:addressed}:"),
            "waiter {i}'s grants went out on {channel}, which every waiting client hears"
        );
        assert!(to.iter().all(|(_, c, _)| c == channel), "{to:?}");
        channels.push(channel.clone());
    }
    channels.dedup();
    assert_eq!(
        channels.len(),
        4,
        "each client a channel of its own: {channels:?}"
    );
    for channel in &channels {
        for node in cluster.nodes() {
            assert_eq!(
                node.subscribers(channel),
                1,
                "only its client listens to {channel}"
            );
        }
    }
}
