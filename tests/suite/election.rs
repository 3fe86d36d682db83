//! Leader election (`Redlock::new_election`) on real nodes: one leader among candidates, hand-over
//! woken by the resignation, epochs that only grow, a record others read, and a loss signal that
//! fires when the lease is taken away or has run out.
//!
//! Standbys here have a retry delay of a minute, longer than any test may take, unless a test is
//! about a crashed leader: a standby that leads within the test's bounds was woken by the
//! resignation, not by its delay.

use std::time::Duration;

use futures::StreamExt;
use redmutex::{Election, Error, LeaderInfo, Leadership, LeadershipEnd, Redlock, fenced_set};
use testenv::Cluster;

use crate::support::{beside, client, present};

/// Longer than any test here may take: only a release notice ends this wait early.
const FALLBACK: Duration = Duration::from_secs(60);
/// A short lease with a generous node timeout (500 ms): a loaded machine must not lose a lease.
const LEASE: Duration = Duration::from_secs(2);

fn election(redlock: &Redlock, name: &str) -> Election {
    redlock
        .new_election(name)
        .with_expiry(LEASE)
        .with_timeout_factor(0.25)
        .with_retry_delay(FALLBACK)
}

/// Three clients (three candidates' processes, in real life) on the same nodes.
async fn clients(cluster: &Cluster) -> Vec<Redlock> {
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client(cluster).await);
    }
    clients
}

/// Campaigns of `ids`, one client each, started at once.
fn campaigns(
    clients: &[Redlock],
    name: &str,
    ids: &[&str],
) -> Vec<tokio::task::JoinHandle<Result<Leadership, Error>>> {
    clients
        .iter()
        .zip(ids)
        .map(|(redlock, id)| {
            let election = election(redlock, name);
            let id = id.to_string();
            tokio::spawn(async move { election.campaign(id).await })
        })
        .collect()
}

/// Waits for the first of `running` to finish, and returns its leadership and the others.
async fn first_leader(
    running: Vec<tokio::task::JoinHandle<Result<Leadership, Error>>>,
) -> (
    Leadership,
    Vec<tokio::task::JoinHandle<Result<Leadership, Error>>>,
) {
    let bounded = tokio::time::timeout(FALLBACK / 3, futures::future::select_all(running));
    let (done, _, rest) = bounded.await.expect("a candidate leads within the bound");
    let leadership = done.expect("no panic").expect("elected");
    (leadership, rest)
}

fn leader_of(info: Option<LeaderInfo>) -> (String, u64) {
    let info = info.expect("a leader");
    (info.identity, info.epoch)
}

#[tokio::test]
async fn exactly_one_of_three_candidates_leads_and_the_nodes_name_it() {
    let cluster = Cluster::start(3);
    let clients = clients(&cluster).await;
    let running = campaigns(&clients, "el:one", &["a", "b", "c"]);
    let (leader, rest) = first_leader(running).await;
    // The others keep waiting while the leader renews, over two leases.
    tokio::time::sleep(LEASE * 2).await;
    assert!(
        rest.iter().all(|task| !task.is_finished()),
        "a second leader"
    );
    assert!(leader.is_leading());
    let read = election(&clients[2], "el:one")
        .leader()
        .await
        .expect("read");
    assert_eq!(
        leader_of(read),
        (leader.identity().to_owned(), leader.epoch())
    );
    // The record sits beside the name, in its slot.
    assert_eq!(present(&cluster, &beside("el:one", ":leader")).len(), 3);
    for task in rest {
        task.abort();
    }
}

/// A resignation hands over at once (the standbys' retry delay is a minute), and so does
/// dropping a leadership; each new leader's epoch is greater than the last.
#[tokio::test]
async fn a_resigned_or_dropped_leader_wakes_a_standby_with_a_greater_epoch() {
    let cluster = Cluster::start(3);
    let clients = clients(&cluster).await;
    let running = campaigns(&clients, "el:handover", &["a", "b", "c"]);
    let (first, rest) = first_leader(running).await;
    // The standbys are waiting for notices, past their first attempt.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first_epoch = first.epoch();
    first.resign().await.expect("resign");
    let (second, rest) = first_leader(rest).await;
    assert!(
        second.epoch() > first_epoch,
        "{} then {}",
        first_epoch,
        second.epoch()
    );
    assert_ne!(second.identity(), "");
    let second_epoch = second.epoch();
    drop(second); // resigns in the background
    let (third, _) = first_leader(rest).await;
    assert!(
        third.epoch() > second_epoch,
        "{second_epoch} then {}",
        third.epoch()
    );
    let read = election(&clients[0], "el:handover").leader().await;
    assert_eq!(
        leader_of(read.expect("read")),
        (third.identity().to_owned(), third.epoch())
    );
    third.resign().await.expect("resign");
    let read = election(&clients[0], "el:handover").leader().await;
    assert_eq!(
        read.expect("read"),
        None,
        "the record names a leader that resigned"
    );
}

/// An operator breaks the lease on every node: the renewal finds it gone, and `lost()` says so;
/// the next leader's epoch is refused nowhere, the old one's is refused by a fenced resource.
#[tokio::test]
async fn lost_resolves_when_the_lease_is_taken_away() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let elect = election(&redlock, "el:taken");
    let old = elect.campaign("old").await.expect("elected");
    for node in cluster.nodes() {
        node.del("el:taken");
    }
    let end = tokio::time::timeout(LEASE * 2, old.lost())
        .await
        .expect("lost() resolves within the lease");
    assert!(
        matches!(end, LeadershipEnd::Lost(Error::Expired)),
        "{end:?}"
    );
    assert!(!old.is_leading());
    let new = elect.campaign("new").await.expect("elected");
    assert!(new.epoch() > old.epoch());
    let store = redis::Client::open(cluster.node(0).url()).expect("url");
    let mut store = store
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    assert!(
        fenced_set(&mut store, "el:taken:work", "new", new.epoch())
            .await
            .expect("set")
    );
    assert!(
        !fenced_set(&mut store, "el:taken:work", "old", old.epoch())
            .await
            .expect("set")
    );
}

/// A majority of nodes stops answering: renewals fail, and `lost()` says so before the lease's
/// validity is over.
#[tokio::test]
async fn lost_resolves_when_renewals_fail() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let leadership = election(&redlock, "el:paused")
        .campaign("a")
        .await
        .expect("elected");
    cluster.node(0).pause();
    cluster.node(1).pause();
    let end = tokio::time::timeout(LEASE * 2, leadership.lost())
        .await
        .expect("lost() resolves within the lease");
    cluster.node(0).resume();
    cluster.node(1).resume();
    assert!(
        matches!(
            end,
            LeadershipEnd::Lost(Error::NoQuorum { .. }) | LeadershipEnd::Expired
        ),
        "{end:?}"
    );
}

/// A leader whose process could not run past its lease (here the runtime's one thread is
/// blocked, as a paused process is) sees at its first look that it no longer leads, before its
/// renewal task ran.
#[tokio::test(flavor = "current_thread")]
async fn a_leader_stalled_past_its_lease_knows_before_it_acts() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let lease = Duration::from_millis(600);
    let elect = election(&redlock, "el:stalled").with_expiry(lease);
    let leadership = elect.campaign("a").await.expect("elected");
    assert!(leadership.is_leading());
    // Nothing else runs on this runtime meanwhile: no renewal.
    std::thread::sleep(lease * 2);
    assert!(!leadership.is_leading(), "acts as leader past its lease");
    assert!(matches!(leadership.end(), Some(LeadershipEnd::Expired)));
    assert!(matches!(leadership.lost().await, LeadershipEnd::Expired));
}

/// `watch()` reports each leader in turn, with its epoch, and the gap between them.
#[tokio::test]
async fn watch_reports_every_change() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let elect = election(&redlock, "el:watch").with_renew_every(Duration::from_millis(100));
    let mut watch = Box::pin(elect.watch());
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("a reading within the bound")
            .expect("the stream goes on")
            .expect("read")
    };
    assert_eq!(next().await, None);
    let mut epochs = Vec::new();
    for id in ["a", "b", "c"] {
        let leadership = elect.campaign(id).await.expect("elected");
        assert_eq!(leader_of(next().await), (id.to_owned(), leadership.epoch()));
        epochs.push(leadership.epoch());
        leadership.resign().await.expect("resign");
        assert_eq!(next().await, None);
    }
    assert!(epochs.windows(2).all(|w| w[0] < w[1]), "{epochs:?}");
}

/// A leader's record stays on the nodes after its lease is gone, and names nobody: a reader
/// trusts it only while the name holds the value it was written for.
#[tokio::test]
async fn a_former_leader_s_record_names_nobody() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    let elect = election(&redlock, "el:former");
    let leadership = elect.campaign("gone").await.expect("elected");
    // An operator breaks the lease; the record stays.
    for node in cluster.nodes() {
        node.del("el:former");
    }
    assert_eq!(present(&cluster, &beside("el:former", ":leader")).len(), 3);
    assert_eq!(elect.leader().await.expect("read"), None);
    // A plain lock on the name is not a leader either.
    let lock = redlock.new_mutex("el:former").lock().await.expect("lock");
    assert_eq!(elect.leader().await.expect("read"), None);
    lock.unlock().await.expect("unlock");
    drop(leadership);
}

#[tokio::test]
async fn bad_settings_are_config_errors_before_any_io() {
    let redlock = Redlock::connect(["redis://127.0.0.1:1/"])
        .await
        .expect("lazy");
    let elect = redlock.new_election("el:bad");
    for (result, field) in [
        (elect.campaign("").await.map(drop), "identity"),
        (
            elect
                .clone()
                .with_renew_every(Duration::from_secs(8))
                .campaign("a")
                .await
                .map(drop),
            "renew_every",
        ),
        (
            elect
                .clone()
                .with_renew_every(Duration::ZERO)
                .campaign("a")
                .await
                .map(drop),
            "renew_every",
        ),
        (
            redlock.new_election("").campaign("a").await.map(drop),
            "name",
        ),
        (
            redlock
                .new_election("x:leader")
                .campaign("a")
                .await
                .map(drop),
            "name",
        ),
    ] {
        assert!(
            matches!(&result, Err(Error::Config { field: f, .. }) if f == field),
            "{field}: {result:?}"
        );
    }
    assert!(matches!(
        redlock.new_election("").leader().await,
        Err(Error::Config { .. })
    ));
}
