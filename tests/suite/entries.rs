//! Exclusion through every entry. An unfenced acquire takes a fast path where one decides as the
//! script would (a mutex's and a one-name multi lock's plain `SET NX PX`, a multi-name lock's
//! `MULTI`/`EXEC` of `SET`s, the writer's `SET NX PX GET`), while a fenced acquire still runs the
//! script the fast path replaced (`acquire_fenced.lua`, `multi/acquire.lua`, `write_acquire.lua`).
//! A test that runs only one entry leaves the other free to break: so the exclusion tests here run
//! through both, on standalone nodes and with a Redis Cluster as one member, and each checks that
//! it took the entry it names (no script ran, or one did).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redmutex::{Error, Lock, Redlock};
use redmutex_testenv::{Cluster, RedisCluster};

use crate::support;
use crate::support::history::History;

/// How an acquire enters: the fast path (unfenced) or the script (fenced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    Plain,
    Script,
}

impl Entry {
    fn fenced(self) -> bool {
        self == Entry::Script
    }
}

/// The members of a quorum: standalone servers, and in the mixed form a Redis Cluster as the
/// last member.
struct Deployment {
    nodes: Cluster,
    cluster: Option<RedisCluster>,
}

impl Deployment {
    fn standalone(n: usize) -> Deployment {
        Deployment {
            nodes: Cluster::start(n),
            cluster: None,
        }
    }

    /// Two standalone servers and a cluster of 3 masters: three members, a quorum of two.
    fn mixed() -> Deployment {
        Deployment {
            nodes: Cluster::start(2),
            cluster: Some(RedisCluster::start(3, 0)),
        }
    }

    fn len(&self) -> usize {
        self.nodes.len() + usize::from(self.cluster.is_some())
    }

    fn urls(&self, members: impl IntoIterator<Item = usize>) -> Vec<String> {
        members
            .into_iter()
            .map(|member| match &self.cluster {
                Some(cluster) if member == self.nodes.len() => cluster.seed_url(),
                _ => self.nodes.node(member).url(),
            })
            .collect()
    }

    async fn client(&self, members: impl IntoIterator<Item = usize>) -> Redlock {
        Redlock::connect(self.urls(members))
            .await
            .expect("valid URLs connect")
    }

    fn get(&self, member: usize, key: &str) -> Option<String> {
        match &self.cluster {
            Some(cluster) if member == self.nodes.len() => cluster.get(key),
            _ => self.nodes.node(member).get(key),
        }
    }

    /// The members where `key` holds `value`.
    fn holding(&self, key: &str, value: &str) -> Vec<usize> {
        (0..self.len())
            .filter(|&member| self.get(member, key).as_deref() == Some(value))
            .collect()
    }

    /// The members where `key` exists.
    fn present(&self, key: &str) -> Vec<usize> {
        (0..self.len())
            .filter(|&member| self.exists(member, key))
            .collect()
    }

    fn exists(&self, member: usize, key: &str) -> bool {
        match &self.cluster {
            Some(cluster) if member == self.nodes.len() => cluster.exists(key),
            _ => self.nodes.node(member).exists(key),
        }
    }

    /// Scripts run so far on the standalone members (`EVALSHA` and `EVAL` calls).
    fn scripts_run(&self) -> u64 {
        self.nodes
            .nodes()
            .iter()
            .map(|node| node.calls("evalsha") + node.calls("eval"))
            .sum()
    }
}

/// What the test locks, and what holds one of its names elsewhere.
#[derive(Clone, Copy, Debug)]
enum Subject {
    /// A mutex; another owner's mutex holds the name.
    Mutex,
    /// A multi-name lock over `names` names; another owner's mutex holds one of them.
    Multi { names: usize },
    /// A write lock; another writer (a mutex, which is one) holds the name.
    WriterBesideWriter,
    /// A write lock; readers hold the name.
    WriterBesideReaders,
}

impl Subject {
    /// The subject's names for one mask, in one hash tag so that a cluster member takes them
    /// together.
    fn names(self, test: &str, mask: u32) -> Vec<String> {
        let count = match self {
            Subject::Multi { names } => names,
            _ => 1,
        };
        (0..count)
            .map(|i| format!("{{entries:{test}:{mask}}}:{i}"))
            .collect()
    }

    /// One attempt of the subject, through `entry`, with quick settings.
    async fn try_lock(
        self,
        redlock: &Redlock,
        names: &[String],
        entry: Entry,
    ) -> Result<Lock, Error> {
        let expiry = Duration::from_secs(5);
        let timeout = 0.1;
        match self {
            Subject::Mutex => {
                redlock
                    .new_mutex(&names[0])
                    .with_expiry(expiry)
                    .with_timeout_factor(timeout)
                    .with_fencing(entry.fenced())
                    .try_lock()
                    .await
            }
            Subject::Multi { .. } => {
                redlock
                    .new_multi_mutex(names.iter().cloned())
                    .with_expiry(expiry)
                    .with_timeout_factor(timeout)
                    .with_fencing(entry.fenced())
                    .try_lock()
                    .await
            }
            Subject::WriterBesideWriter | Subject::WriterBesideReaders => {
                redlock
                    .new_rwlock(&names[0])
                    .with_expiry(expiry)
                    .with_timeout_factor(timeout)
                    .with_fencing(entry.fenced())
                    .try_write()
                    .await
            }
        }
    }

    /// Takes `name` for another owner on exactly the members of `other` (a client over them).
    async fn take_for_another(self, other: &Redlock, name: &str) -> Lock {
        let long = Duration::from_secs(30);
        match self {
            Subject::WriterBesideReaders => {
                other.new_rwlock(name).with_expiry(long).try_read().await
            }
            _ => other.new_mutex(name).with_expiry(long).try_lock().await,
        }
        .expect("the other owner takes a free name on its members")
    }
}

/// One name of the subject taken by another owner on every subset of the members (which name
/// varies with the subset): an attempt through `entry` succeeds exactly when a quorum of members
/// is free of every name, holds every name on exactly the free members, and a failure is `Taken`
/// by exactly the taken members and leaves nothing of ours.
async fn every_mask(deployment: Deployment, subject: Subject, entry: Entry, test: &str) {
    let members = deployment.len();
    let quorum = members / 2 + 1;
    let redlock = deployment.client(0..members).await;
    for mask in 0u32..(1 << members) {
        let names = subject.names(test, mask);
        let taken_name = &names[mask as usize % names.len()];
        let taken: Vec<usize> = (0..members).filter(|i| mask & (1 << i) != 0).collect();
        let free: Vec<usize> = (0..members).filter(|i| !taken.contains(i)).collect();
        let other = if taken.is_empty() {
            None
        } else {
            let other = deployment.client(taken.iter().copied()).await;
            let held = subject.take_for_another(&other, taken_name).await;
            Some((other, held))
        };
        let scripts = deployment.scripts_run();
        let result = subject.try_lock(&redlock, &names, entry).await;
        let what = format!("{subject:?} through {entry:?}, mask {mask:0members$b}");
        if mask == 0 {
            // Free names: the entry named is the entry taken.
            let ran = deployment.scripts_run() > scripts;
            assert_eq!(ran, entry == Entry::Script, "{what}: a script ran: {ran}");
        }
        match result {
            Ok(lock) => {
                assert!(free.len() >= quorum, "{what}: locked with {free:?} free");
                assert_eq!(lock.token().is_some(), entry.fenced(), "{what}");
                for name in &names {
                    assert_eq!(
                        deployment.holding(name, lock.value()),
                        free,
                        "{what}: {name}"
                    );
                }
                lock.unlock().await.expect("unlock");
            }
            Err(error) => {
                assert!(free.len() < quorum, "{what}: failed: {error}");
                assert!(
                    matches!(&error, Error::Taken { nodes } if *nodes == taken),
                    "{what}: {error:?}"
                );
            }
        }
        // Nothing of ours anywhere: only the other owner's hold on the name it took.
        for name in &names {
            let expected = if name == taken_name { &taken[..] } else { &[] };
            assert_eq!(deployment.present(name), expected, "{what}: {name}");
        }
        if let Some((_, held)) = other {
            held.unlock().await.expect("the other owner still holds");
        }
    }
}

macro_rules! mask_tests {
    ($($test:ident: $deployment:expr, $subject:expr, $entry:expr;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            every_mask($deployment, $subject, $entry, stringify!($test)).await;
        }
    )*};
}

mask_tests! {
    mutex_masks_plain: Deployment::standalone(5), Subject::Mutex, Entry::Plain;
    mutex_masks_script: Deployment::standalone(5), Subject::Mutex, Entry::Script;
    mutex_masks_with_a_cluster_plain: Deployment::mixed(), Subject::Mutex, Entry::Plain;
    mutex_masks_with_a_cluster_script: Deployment::mixed(), Subject::Mutex, Entry::Script;
    multi_masks_plain: Deployment::standalone(5), Subject::Multi { names: 3 }, Entry::Plain;
    multi_masks_script: Deployment::standalone(5), Subject::Multi { names: 3 }, Entry::Script;
    multi_masks_with_a_cluster_plain: Deployment::mixed(), Subject::Multi { names: 3 }, Entry::Plain;
    multi_masks_with_a_cluster_script: Deployment::mixed(), Subject::Multi { names: 3 }, Entry::Script;
    one_name_multi_masks_plain: Deployment::standalone(5), Subject::Multi { names: 1 }, Entry::Plain;
    one_name_multi_masks_script: Deployment::standalone(5), Subject::Multi { names: 1 }, Entry::Script;
    writer_beside_a_writer_masks_plain: Deployment::standalone(5), Subject::WriterBesideWriter, Entry::Plain;
    writer_beside_a_writer_masks_script: Deployment::standalone(5), Subject::WriterBesideWriter, Entry::Script;
    writer_beside_a_writer_masks_with_a_cluster_plain: Deployment::mixed(), Subject::WriterBesideWriter, Entry::Plain;
    writer_beside_a_writer_masks_with_a_cluster_script: Deployment::mixed(), Subject::WriterBesideWriter, Entry::Script;
    writer_beside_readers_masks_plain: Deployment::standalone(5), Subject::WriterBesideReaders, Entry::Plain;
    writer_beside_readers_masks_script: Deployment::standalone(5), Subject::WriterBesideReaders, Entry::Script;
    writer_beside_readers_masks_with_a_cluster_plain: Deployment::mixed(), Subject::WriterBesideReaders, Entry::Plain;
    writer_beside_readers_masks_with_a_cluster_script: Deployment::mixed(), Subject::WriterBesideReaders, Entry::Script;
}

/// 16 tasks move money between 6 accounts, each transfer under a multi-name lock of its two
/// accounts entered through `entries` in turn (task `i` through `entries[i % len]`), with a
/// non-atomic read-modify-write on a separate Redis: the total is conserved, and no two critical
/// sections on one account overlap, whichever entry each took.
async fn transfers_conserve_the_total(deployment: Deployment, entries: &[Entry]) {
    const ACCOUNTS: usize = 6;
    const TASKS: usize = 16;
    const TRANSFERS: usize = 25;
    let bank = Cluster::start(1);
    let redlock = deployment.client(0..deployment.len()).await;
    let store = redis::Client::open(bank.node(0).url())
        .expect("URL")
        .get_multiplexed_async_connection()
        .await
        .expect("bank connects");
    // One hash tag: a cluster member takes any two accounts together.
    let account = |i: usize| format!("{{entries:bank}}:account:{i}");
    for i in 0..ACCOUNTS {
        bank.node(0).set(&format!("balance:{i}"), "1000");
    }
    let histories: Arc<Vec<History>> = Arc::new((0..ACCOUNTS).map(|_| History::new()).collect());
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let entry = entries[task % entries.len()];
        let (redlock, mut store, histories) =
            (redlock.clone(), store.clone(), Arc::clone(&histories));
        tasks.push(tokio::spawn(async move {
            for _ in 0..TRANSFERS {
                let from = rand::random_range(0..ACCOUNTS);
                let to = (from + rand::random_range(1..ACCOUNTS)) % ACCOUNTS;
                let amount = rand::random_range(1..50i64);
                let lock = support::contended_multi(&redlock, &[account(from), account(to)])
                    .with_fencing(entry.fenced())
                    .lock()
                    .await
                    .expect("the transfer gets its accounts");
                assert_eq!(lock.token().is_some(), entry.fenced());
                let acquired = Instant::now();
                let (a, b) = (format!("balance:{from}"), format!("balance:{to}"));
                let balance_a: i64 = store.get(&a).await.expect("GET");
                let balance_b: i64 = store.get(&b).await.expect("GET");
                // Widens the window a missing exclusion would need.
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..3))).await;
                let _: () = store.set(&a, balance_a - amount).await.expect("SET");
                let _: () = store.set(&b, balance_b + amount).await.expect("SET");
                let released = Instant::now();
                let holder = format!("task{task}:{}", lock.value());
                for i in [from, to] {
                    histories[i].record(&holder, acquired, released, lock.valid_until());
                }
                lock.unlock().await.expect("unlock");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let mut total = 0;
    for i in 0..ACCOUNTS {
        let balance: i64 = bank
            .node(0)
            .get(&format!("balance:{i}"))
            .expect("balance")
            .parse()
            .expect("a number");
        total += balance;
    }
    assert_eq!(total, 1000 * ACCOUNTS as i64, "money was created or lost");
    let sections: usize = histories.iter().map(History::len).sum();
    assert_eq!(sections, 2 * TASKS * TRANSFERS);
    for history in histories.iter() {
        history.assert_exclusive();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_plain() {
    transfers_conserve_the_total(Deployment::standalone(5), &[Entry::Plain]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_fenced() {
    transfers_conserve_the_total(Deployment::standalone(5), &[Entry::Script]).await;
}

/// Both entries at once, with a cluster member: each entry refuses a name the other took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_through_both_entries_with_a_cluster() {
    transfers_conserve_the_total(Deployment::mixed(), &[Entry::Plain, Entry::Script]).await;
}
