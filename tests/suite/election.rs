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
use redmutex_testenv::Cluster;

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
    // The record sits beside the name, in its slot, on a quorum at least (where a rival's
    // attempt took a node first, the leader's raise did not write there).
    assert!(present(&cluster, &beside("el:one", ":leader")).len() >= 2);
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

/// `watch()` hears a resignation by its release notice, and the next leader's election right
/// after, long before its next periodic reading (a period of 50 s here).
#[tokio::test]
async fn watch_hears_a_resignation_by_its_notice() {
    let cluster = Cluster::start(3);
    let clients = clients(&cluster).await;
    let slow = |redlock: &Redlock| {
        election(redlock, "el:watch-notice")
            .with_expiry(Duration::from_secs(60))
            .with_renew_every(Duration::from_secs(50))
    };
    let leadership = slow(&clients[0]).campaign("a").await.expect("elected");
    let mut watch = Box::pin(slow(&clients[1]).watch());
    let first = watch.next().await.expect("a first reading").expect("read");
    assert_eq!(leader_of(first).0, "a");
    let standby = slow(&clients[2]);
    let next = tokio::spawn(async move { standby.campaign("b").await });
    leadership.resign().await.expect("resign");
    let seen_b = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(reading) = watch.next().await {
            if let Some(leader) = reading.expect("read") {
                assert_eq!(leader.identity, "b", "a resigned");
                return;
            }
        }
    })
    .await;
    assert!(seen_b.is_ok(), "the watcher did not hear the hand-over");
    drop(next.await.expect("the standby's task").expect("b elected"));
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
    assert!(present(&cluster, &beside("el:former", ":leader")).len() >= 2);
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
                .new_election("{x}:leader")
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

// Candidates in processes of their own: the test binary runs `election::candidate` again, which
// campaigns when `CANDIDATE` is set and prints what it does, one `@el` line per event, with the
// time on CLOCK_MONOTONIC, which every process on the machine shares.

/// `id|name|lease in ms|node URLs, comma-separated|store URL|again (1 or 0)`.
const CANDIDATE: &str = "REDMUTEX_TEST_CANDIDATE";
/// The key the leaders write with their epoch, on the store.
const WORK: &str = "el:work";

fn monotonic_nanos() -> u128 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let seconds = u128::try_from(now.tv_sec).expect("after boot");
    let nanos = u128::try_from(now.tv_nsec).expect("in range");
    seconds * 1_000_000_000 + nanos
}

/// A candidate process: campaigns, then acts as leader every 10 ms (an `ACT` line, then a fenced
/// write) while `is_leading()` holds; when it no longer leads, it says so (`LOST`), tries the
/// write a stale leader would (`STALE`), and campaigns again if asked to.
#[tokio::test]
async fn candidate() {
    let Ok(spec) = std::env::var(CANDIDATE) else {
        return;
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let [id, name, lease, urls, store, again] = parts[..] else {
        panic!("bad {CANDIDATE}: {spec}");
    };
    let lease = Duration::from_millis(lease.parse().expect("a lease"));
    println!("@el START {}", monotonic_nanos());
    let redlock = Redlock::connect(urls.split(',')).await.expect("URLs parse");
    let election = redlock
        .new_election(name)
        .with_expiry(lease)
        .with_timeout_factor(0.2)
        .with_retry_delay(Duration::from_millis(20));
    let store = redis::Client::open(store).expect("store URL");
    let mut store = store
        .get_multiplexed_async_connection()
        .await
        .expect("store connects");
    loop {
        println!("@el CAMPAIGN {}", monotonic_nanos());
        let leadership = match election.campaign(id).await {
            Ok(leadership) => leadership,
            Err(error) => {
                println!("@el ERROR {error}");
                continue;
            }
        };
        let epoch = leadership.epoch();
        println!("@el LEADING {epoch} {}", monotonic_nanos());
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            // The time first, then the check: an act stamped while it still led.
            let now = monotonic_nanos();
            if let Some(end) = leadership.end() {
                println!("@el LOST {epoch} {now} {end:?}");
                let written = fenced_set(&mut store, WORK, id, epoch).await;
                println!("@el STALE {epoch} {}", written_word(written));
                break;
            }
            println!("@el ACT {epoch} {now}");
            let written = fenced_set(&mut store, WORK, id, epoch).await;
            println!("@el WROTE {epoch} {}", written_word(written));
        }
        drop(leadership);
        if again != "1" {
            return;
        }
    }
}

/// A write's outcome as one word: a candidate paused in the middle of a write finds it timed out
/// when it resumes, which is no reason to stop.
fn written_word(written: redis::RedisResult<bool>) -> String {
    match written {
        Ok(accepted) => accepted.to_string(),
        Err(error) => format!("error:{}", error.category().replace(' ', "-")),
    }
}

/// One line of a candidate, as the parent reads it.
#[derive(Debug, Clone)]
struct Event {
    child: usize,
    words: Vec<String>,
}

impl Event {
    fn kind(&self) -> &str {
        &self.words[0]
    }

    fn number(&self, index: usize) -> u128 {
        self.words[index].parse().expect("a number")
    }
}

/// Candidate processes and what they print; killed (and reaped) on drop.
struct Candidates {
    children: Vec<Option<std::process::Child>>,
    sender: std::sync::mpsc::Sender<Event>,
    events: std::sync::mpsc::Receiver<Event>,
    spec: Box<dyn Fn(usize) -> String>,
    /// Every event read so far.
    log: Vec<Event>,
}

impl Candidates {
    fn start(cluster: &Cluster, store: &Cluster, name: &str, lease: Duration, again: bool) -> Self {
        let (urls, store) = (cluster.urls().join(","), store.node(0).url());
        let (name, lease) = (name.to_owned(), lease.as_millis());
        let again = u8::from(again);
        let spec = move |child| format!("c{child}|{name}|{lease}|{urls}|{store}|{again}");
        let (sender, events) = std::sync::mpsc::channel();
        let mut candidates = Candidates {
            children: Vec::new(),
            sender,
            events,
            spec: Box::new(spec),
            log: Vec::new(),
        };
        for child in 0..3 {
            candidates.children.push(None);
            candidates.spawn(child);
        }
        candidates
    }

    /// Starts candidate `child` (again), with a thread that passes its lines on.
    fn spawn(&mut self, child: usize) {
        use std::io::BufRead;
        let mut process = std::process::Command::new(std::env::current_exe().expect("path"))
            .args([
                "--exact",
                "election::candidate",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CANDIDATE, (self.spec)(child))
            .stdout(std::process::Stdio::piped())
            .stderr(match std::env::var_os("REDMUTEX_TEST_CANDIDATE_LOG") {
                Some(path) => std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("log file")
                    .into(),
                None => std::process::Stdio::null(),
            })
            .spawn()
            .expect("the test binary runs");
        let stdout = process.stdout.take().expect("piped");
        let sender = self.sender.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                // The harness prints the test's name on the line of the first event.
                let Some((_, event)) = line.split_once("@el ") else {
                    continue;
                };
                let words = event.split(' ').map(str::to_owned).collect();
                if sender.send(Event { child, words }).is_err() {
                    return;
                }
            }
        });
        self.children[child] = Some(process);
    }

    fn pid(&self, child: usize) -> String {
        let process = self.children[child].as_ref().expect("running");
        process.id().to_string()
    }

    fn signal(&self, child: usize, signal: &str) {
        let status = std::process::Command::new("kill")
            .args([signal, &self.pid(child)])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal}");
    }

    fn kill(&mut self, child: usize) {
        if let Some(mut process) = self.children[child].take() {
            let _ = process.kill();
            let _ = process.wait();
        }
    }

    /// The next event that `wanted` accepts, within `limit`; every event is logged.
    fn next(&mut self, limit: Duration, what: &str, wanted: impl Fn(&Event) -> bool) -> Event {
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let event = self
                .events
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what} within {limit:?}; log: {:?}", self.tail()));
            self.log.push(event.clone());
            if wanted(&event) {
                return event;
            }
        }
    }

    /// Reads what is already in.
    fn drain(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            self.log.push(event);
        }
    }

    /// The last events but acts and writes, which come by the hundred.
    fn tail(&self) -> Vec<&Event> {
        let quiet = |e: &&Event| !matches!(e.kind(), "ACT" | "WROTE");
        self.log.iter().rev().filter(quiet).take(30).collect()
    }
}

impl Drop for Candidates {
    fn drop(&mut self) {
        for child in 0..self.children.len() {
            self.kill(child);
        }
    }
}

/// Checks the history of `events`: per epoch, the acts of exactly one candidate; epochs in the
/// order their terms began; and no act of an epoch after the first act of a later one, on the
/// one monotonic clock. Returns the number of terms.
fn check_terms(events: &[Event]) -> usize {
    // epoch -> (candidate, first act, last act)
    let mut terms: std::collections::BTreeMap<u128, (usize, u128, u128)> = Default::default();
    for event in events.iter().filter(|e| e.kind() == "ACT") {
        let (epoch, at) = (event.number(1), event.number(2));
        let term = terms.entry(epoch).or_insert((event.child, at, at));
        assert_eq!(
            term.0, event.child,
            "two candidates acted with epoch {epoch}"
        );
        term.1 = term.1.min(at);
        term.2 = term.2.max(at);
    }
    let terms: Vec<(u128, (usize, u128, u128))> = terms.into_iter().collect();
    for pair in terms.windows(2) {
        let ((early, (_, _, last)), (late, (_, first, _))) = (pair[0], pair[1]);
        assert!(
            last < first,
            "epoch {early} acted {} µs after epoch {late} began",
            (last - first) / 1000
        );
    }
    terms.len()
}

/// Generous: the machine is shared, and a child prints through a pipe.
const BOUND: Duration = Duration::from_secs(20);
/// What a failover may take beyond the lease and one renewal period here: the standbys' retry
/// delay (20 ms), a campaign's round trips, and a loaded machine. The measured figures are in
/// benches/README.md.
const SLACK: Duration = Duration::from_secs(2);

fn is_leading(event: &Event) -> bool {
    event.kind() == "LEADING"
}

/// Epochs strictly increase in the order terms began, on the one clock.
fn check_epochs(events: &[Event]) -> usize {
    let mut began: Vec<(u128, u128)> = events
        .iter()
        .filter(|e| is_leading(e))
        .map(|e| (e.number(2), e.number(1)))
        .collect();
    began.sort();
    for pair in began.windows(2) {
        assert!(
            pair[0].1 < pair[1].1,
            "epoch {} began after {}",
            pair[1].1,
            pair[0].1
        );
    }
    began.len()
}

/// Three candidate processes: one leads (and only it acts); SIGKILL it, and another leads
/// within the lease and one renewal period (with slack for the machine), with a greater epoch.
#[test]
fn three_processes_one_leads_and_a_killed_leader_is_replaced() {
    let (cluster, store) = (Cluster::start(3), Cluster::start(1));
    let lease = Duration::from_secs(1);
    let mut candidates = Candidates::start(&cluster, &store, "el:kill", lease, false);
    let first = candidates.next(BOUND, "a leader", is_leading);
    std::thread::sleep(lease * 2);
    candidates.drain();
    let leaders: std::collections::BTreeSet<usize> = candidates
        .log
        .iter()
        .filter(|e| is_leading(e))
        .map(|e| e.child)
        .collect();
    assert_eq!(leaders.len(), 1, "{:?}", candidates.tail());
    let killed = std::time::Instant::now();
    candidates.kill(first.child);
    let second = candidates.next(BOUND, "a second leader", is_leading);
    let took = killed.elapsed();
    assert_ne!(second.child, first.child);
    assert!(second.number(1) > first.number(1));
    assert!(
        took <= lease + lease / 3 + SLACK,
        "failover took {took:?} with a lease of {lease:?}"
    );
    candidates.next(BOUND, "an act", |e| e.kind() == "ACT");
    check_terms(&candidates.log);
    check_epochs(&candidates.log);
}

/// SIGSTOP the leader past its lease: another leads and writes with its epoch; when the first
/// resumes, the first thing it does is to find its leadership lost, and its epoch is refused by
/// the fenced resource.
#[test]
fn a_leader_paused_past_its_lease_finds_it_lost_and_is_refused() {
    let (cluster, store) = (Cluster::start(3), Cluster::start(1));
    let lease = Duration::from_secs(1);
    let mut candidates = Candidates::start(&cluster, &store, "el:stop", lease, false);
    let first = candidates.next(BOUND, "a leader", is_leading);
    let wrote = |child: usize| move |e: &Event| e.child == child && e.kind() == "WROTE";
    candidates.next(BOUND, "a write", wrote(first.child));
    candidates.signal(first.child, "-STOP");
    let second = candidates.next(BOUND, "a second leader", is_leading);
    assert_ne!(second.child, first.child);
    assert!(second.number(1) > first.number(1));
    let accepted = candidates.next(BOUND, "a write", wrote(second.child));
    assert_eq!(accepted.words[2], "true");
    candidates.drain();
    candidates.signal(first.child, "-CONT");
    // A write in flight when it stopped may report first; then the loss, never another act.
    let resumed = candidates.next(BOUND, "the resumed leader", |e| {
        e.child == first.child && e.kind() != "WROTE"
    });
    assert_eq!(resumed.kind(), "LOST", "acted after resuming: {resumed:?}");
    let stale = candidates.next(BOUND, "the stale write", |e| e.child == first.child);
    assert_eq!(stale.words, ["STALE", &first.words[1], "false"]);
    check_terms(&candidates.log);
    check_epochs(&candidates.log);
}

/// Fifty elections, each forced by SIGKILL or SIGSTOP of the leader process, half of them while
/// a Redis node is paused too: terms on the one monotonic clock never overlap, and epochs
/// strictly increase.
#[test]
#[ignore = "slow: fifty elections"]
fn fifty_elections_with_random_faults_keep_terms_apart() {
    let (cluster, store) = (Cluster::start(3), Cluster::start(1));
    let lease = Duration::from_millis(500);
    let mut candidates = Candidates::start(&cluster, &store, "el:history", lease, true);
    let mut leader = candidates.next(BOUND, "a leader", is_leading);
    let mut elections = 1;
    while elections < 50 {
        let epoch = leader.number(1);
        let later = move |e: &Event| is_leading(e) && e.number(1) > epoch;
        // The leader acts, unless it lost already (a node paused in the round before).
        let seen = candidates.next(BOUND, "an act or a new leader", |e| {
            later(e) || (e.kind() == "ACT" && e.number(1) == epoch)
        });
        if is_leading(&seen) {
            (leader, elections) = (seen, elections + 1);
            continue;
        }
        let node = (rand::random_range(0..2) == 0).then(|| rand::random_range(0..3));
        if let Some(node) = node {
            cluster.node(node).pause();
        }
        let stopped = rand::random_range(0..2) == 0;
        let faulted = std::time::Instant::now();
        if stopped {
            candidates.signal(leader.child, "-STOP");
        } else {
            candidates.kill(leader.child);
        }
        eprintln!("round {elections}: {leader:?} stopped={stopped} node={node:?}");
        let next = candidates.next(BOUND, "the next leader", later);
        if let Some(node) = node {
            cluster.node(node).resume();
        }
        if stopped {
            std::thread::sleep((lease * 3 / 2).saturating_sub(faulted.elapsed()));
            candidates.signal(leader.child, "-CONT");
        } else {
            candidates.spawn(leader.child);
        }
        (leader, elections) = (next, elections + 1);
    }
    std::thread::sleep(lease);
    for child in 0..3 {
        candidates.kill(child);
    }
    candidates.drain();
    // A leader forced out by a paused node before its first act has no term to check.
    assert!(check_terms(&candidates.log) >= 25);
    assert!(check_epochs(&candidates.log) >= 50);
}

/// The history checks' negative controls: an act of an older epoch after a newer one began, and
/// a newer epoch that began first, are found.
#[test]
fn the_history_checks_find_overlaps_and_epochs_out_of_order() {
    let event = |child, words: &[&str]| Event {
        child,
        words: words.iter().map(|w| w.to_string()).collect(),
    };
    let overlapping = [
        event(0, &["ACT", "1", "100"]),
        event(1, &["ACT", "2", "150"]),
        event(0, &["ACT", "1", "200"]),
    ];
    let found = std::panic::catch_unwind(|| check_terms(&overlapping));
    assert!(found.is_err(), "an overlap went unnoticed");
    assert_eq!(check_terms(&overlapping[..2]), 2);
    let reversed = [
        event(0, &["LEADING", "2", "100"]),
        event(1, &["LEADING", "1", "200"]),
    ];
    assert!(std::panic::catch_unwind(|| check_epochs(&reversed)).is_err());
    assert_eq!(check_epochs(&reversed[..1]), 1);
}

/// Too few nodes to read from: `watch()` passes the error on, goes on reading, and reports the
/// first reading after it even though the leader did not change.
#[tokio::test]
async fn watch_passes_errors_on_and_reads_again() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster).await;
    // The leader renews every 3 s, with 2.5 s per node: a short pause costs it nothing.
    let lease = Duration::from_secs(10);
    let elect = election(&redlock, "el:watch-errors").with_expiry(lease);
    let leadership = elect.campaign("a").await.expect("elected");
    // The watcher reads every 100 ms, with 100 ms per node.
    let watcher = elect
        .clone()
        .with_timeout_factor(0.01)
        .with_renew_every(Duration::from_millis(100));
    let mut watch = Box::pin(watcher.watch());
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), watch.next())
            .await
            .expect("a reading within the bound")
            .expect("the stream goes on")
    };
    let leader = ("a".to_owned(), leadership.epoch());
    assert_eq!(leader_of(next().await.expect("read")), leader);
    cluster.node(0).pause();
    cluster.node(1).pause();
    let error = next().await;
    cluster.node(0).resume();
    cluster.node(1).resume();
    assert!(matches!(error, Err(Error::NoQuorum { .. })), "{error:?}");
    assert_eq!(leader_of(next().await.expect("read again")), leader);
    assert!(leadership.is_leading());
}

/// `Leadership::run`: the work runs while leading (over several leases), and the leadership is
/// resigned the moment it is done, which lets a standby in at once.
#[tokio::test]
async fn run_leads_through_the_work_and_resigns_when_done() {
    let cluster = Cluster::start(3);
    let clients = clients(&cluster).await;
    let lease = Duration::from_millis(600);
    let leadership = election(&clients[0], "el:run")
        .with_expiry(lease)
        .campaign("a")
        .await
        .expect("elected");
    let epoch = leadership.epoch();
    let standby = election(&clients[1], "el:run").with_expiry(lease);
    let waiting = tokio::spawn(async move { standby.campaign("b").await });
    let work = async move {
        tokio::time::sleep(lease * 7 / 2).await;
        epoch
    };
    assert_eq!(leadership.run(work).await.expect("led throughout"), epoch);
    let next = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("woken by the resignation")
        .expect("no panic")
        .expect("elected");
    assert!(next.epoch() > epoch);
    next.resign().await.expect("resign");
}

/// Three nodes of five stopped while a leader runs its work: the work is dropped, and `run`
/// returns the loss, no later than the stop plus the lease.
#[tokio::test]
async fn a_majority_stopped_drops_the_leader_s_work_in_time() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster).await;
    let lease = Duration::from_secs(1);
    let leadership = redlock
        .new_election("el:run-stopped")
        .with_expiry(lease)
        .campaign("a")
        .await
        .expect("elected");
    let clock = crate::run::DropClock::default();
    let work = crate::run::endless(clock.guard());
    let running = tokio::spawn(async move {
        let result = leadership.run(work).await;
        (result, std::time::Instant::now())
    });
    tokio::time::sleep(lease / 2).await;
    let stopped = std::time::Instant::now();
    for node in 0..3 {
        cluster.node(node).pause();
    }
    let (result, returned) = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .expect("run returned")
        .expect("no panic");
    let dropped = clock.dropped().expect("the work was dropped");
    for node in 0..3 {
        cluster.node(node).resume();
    }
    match &result {
        // The keep-alive's report, with the nodes' answers; or, on a machine too loaded for it
        // to come first, the run's own timer at the end of the validity.
        Err(Error::Lost { cause }) => assert!(
            matches!(**cause, Error::NoQuorum { .. } | Error::Expired),
            "{cause}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(dropped <= returned);
    assert!(
        returned <= stopped + lease,
        "returned {:?} after the stop",
        returned - stopped
    );
}
