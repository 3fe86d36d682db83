//! The checks over a merged history: each safety property the soak promises, and the violations
//! that break it, each with the operations involved.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use crate::history::{Call, History, Kind, Nanos, Sample, Section, Write};

/// A process's memory is checked once it lived this long: its first and last minute apart.
pub const MEMORY_CHECKED_AFTER: Nanos = 120 * SECOND;
/// The stretch at each end of a process's life that is compared.
const MEMORY_WINDOW: Nanos = 60 * SECOND;
/// The growth allowed between the first minute's peak and the last minute's median: a quarter of
/// that peak, and never less than 4 MiB (the allocator's arenas and the connections' buffers
/// settle at sizes that vary from run to run).
const MEMORY_SLACK_PERCENT: u64 = 25;
const MEMORY_SLACK_MIN_KB: u64 = 4096;
const SECOND: Nanos = 1_000_000_000;

/// A broken promise, with the operations that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two holders of a mutex (or a writer, or a mutex and a writer) of one name at once.
    Exclusion {
        name: String,
        a: Section,
        b: Section,
    },
    /// A reader held a name beside a writer or a mutex.
    ReaderBesideWriter {
        name: String,
        a: Section,
        b: Section,
    },
    /// A multi-name lock held beside another holder of one of its names.
    MultiName {
        name: String,
        a: Section,
        b: Section,
    },
    /// More holders of a semaphore's permits at one instant than it has permits.
    Permits {
        name: String,
        permits: u32,
        at: Nanos,
        holders: Vec<Section>,
    },
    /// Two leaders' terms of one election at once.
    Terms {
        name: String,
        a: Section,
        b: Section,
    },
    /// A later holder of a name got a token (or epoch) no greater than an earlier holder's.
    TokenOrder {
        name: String,
        a: Section,
        b: Section,
    },
    /// A resource accepted a write whose token was below one it had accepted before, or accepted
    /// one token from two holders.
    FenceOrder {
        resource: String,
        a: Write,
        b: Write,
    },
    /// A call took longer than its bound while its process ran.
    Late { call: Call },
    /// A call never returned, though its process lived on past its bound.
    Hang { call: Call, stopped: Nanos },
    /// A process's memory grew beyond the bound from its first minute to its last.
    Memory { growth: Growth },
}

/// A process's resident memory at both ends of its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Growth {
    pub process: String,
    /// The first minute's peak.
    pub first_kb: u64,
    /// The last minute's median.
    pub last_kb: u64,
    /// How long the process's samples span.
    pub lived: Nanos,
}

impl Growth {
    /// Whether the last minute's median exceeds the first minute's peak by more than the slack.
    pub fn too_much(&self) -> bool {
        let slack = (self.first_kb * MEMORY_SLACK_PERCENT / 100).max(MEMORY_SLACK_MIN_KB);
        self.last_kb > self.first_kb + slack
    }
}

impl fmt::Display for Growth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} kB at most in its first minute, {} kB (median) in its last, over {} s",
            self.process,
            self.first_kb,
            self.last_kb,
            self.lived / SECOND
        )
    }
}

impl Violation {
    /// A short name of the property broken, for counting.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Exclusion { .. } => "exclusion",
            Violation::ReaderBesideWriter { .. } => "reader-beside-writer",
            Violation::MultiName { .. } => "multi-name",
            Violation::Permits { .. } => "permits",
            Violation::Terms { .. } => "terms",
            Violation::TokenOrder { .. } => "token-order",
            Violation::FenceOrder { .. } => "fence-order",
            Violation::Late { .. } => "late",
            Violation::Hang { .. } => "hang",
            Violation::Memory { .. } => "memory",
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind();
        match self {
            Violation::Exclusion { name, a, b }
            | Violation::ReaderBesideWriter { name, a, b }
            | Violation::MultiName { name, a, b }
            | Violation::Terms { name, a, b }
            | Violation::TokenOrder { name, a, b } => {
                write!(f, "{kind} on {name:?}:\n  {}\n  {}", show(a), show(b))
            }
            Violation::Permits {
                name,
                permits,
                at,
                holders,
            } => {
                write!(
                    f,
                    "{kind} on {name:?}: {} holders of {permits} permits at {at}",
                    holders.len()
                )?;
                holders
                    .iter()
                    .try_for_each(|h| write!(f, "\n  {}", show(h)))
            }
            Violation::FenceOrder { resource, a, b } => {
                write!(f, "{kind} on {resource:?}:\n  {a:?}\n  {b:?}")
            }
            Violation::Late { call } => write!(f, "{kind}: {call:?}"),
            Violation::Hang { call, stopped } => {
                write!(f, "{kind}: {call:?}, its process stopped at {stopped}")
            }
            Violation::Memory { growth } => write!(
                f,
                "{kind}: {growth} (allowed: {MEMORY_SLACK_PERCENT}% or {MEMORY_SLACK_MIN_KB} kB)"
            ),
        }
    }
}

fn show(s: &Section) -> String {
    format!(
        "{} {:?} {:?} by {} token {:?}: [{}, {}) (exit {:?}, valid until {})",
        s.id,
        s.kind,
        s.names,
        s.holder,
        s.token,
        s.enter,
        s.end(),
        s.exit,
        s.valid_until
    )
}

/// Every violation in the history, each reported once.
pub fn check(history: &History) -> Vec<Violation> {
    let mut violations = Vec::new();
    violations.extend(locks(history));
    violations.extend(permits(history));
    violations.extend(terms(history));
    violations.extend(tokens(history));
    violations.extend(fences(history));
    violations.extend(calls(history));
    violations.extend(
        growths(history)
            .into_iter()
            .filter(Growth::too_much)
            .map(|growth| Violation::Memory { growth }),
    );
    violations
}

/// The memory of each process whose samples span `MEMORY_CHECKED_AFTER` or more (a process
/// killed sooner, or every process of a short run, is not judged), by process name.
pub fn growths(history: &History) -> Vec<Growth> {
    let mut processes: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for sample in &history.memory {
        processes.entry(&sample.process).or_default().push(sample);
    }
    let mut growths = Vec::new();
    for (process, mut samples) in processes {
        samples.sort_by_key(|s| s.at);
        let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
            continue;
        };
        let lived = last.at - first.at;
        if lived < MEMORY_CHECKED_AFTER {
            continue;
        }
        let first_kb = samples
            .iter()
            .take_while(|s| s.at <= first.at + MEMORY_WINDOW)
            .map(|s| s.rss_kb)
            .max()
            .unwrap_or(0);
        let mut ending: Vec<u64> = samples
            .iter()
            .filter(|s| s.at >= last.at - MEMORY_WINDOW)
            .map(|s| s.rss_kb)
            .collect();
        ending.sort_unstable();
        growths.push(Growth {
            process: process.to_owned(),
            first_kb,
            last_kb: ending[ending.len() / 2],
            lived,
        });
    }
    growths
}

/// Sections of each name, by when they began, with their overlapping pairs.
fn by_name<'h>(sections: impl Iterator<Item = &'h Section>) -> BTreeMap<&'h str, Vec<&'h Section>> {
    let mut names: BTreeMap<&str, Vec<&Section>> = BTreeMap::new();
    for section in sections {
        for name in &section.names {
            names.entry(name).or_default().push(section);
        }
    }
    for list in names.values_mut() {
        list.sort_by_key(|s| s.enter);
    }
    names
}

/// Each pair of sections of one name, of different holders, held at a common instant.
fn overlapping<'h>(list: &[&'h Section]) -> Vec<(&'h Section, &'h Section)> {
    let mut pairs = Vec::new();
    for (i, a) in list.iter().enumerate() {
        // Sorted by start: only later sections that begin before `a` ends can overlap it.
        for b in list[i + 1..].iter().take_while(|b| b.enter < a.end()) {
            if a.holder != b.holder && a.overlaps(b) {
                pairs.push((*a, *b));
            }
        }
    }
    pairs
}

fn locks(history: &History) -> Vec<Violation> {
    let mut violations = Vec::new();
    // Two multi-name locks that share several names overlap on each: say so once.
    let mut seen = HashSet::new();
    let names = by_name(history.sections.iter().filter(|s| s.kind.is_lock()));
    for (name, list) in names {
        for (a, b) in overlapping(&list) {
            if a.kind == Kind::Reader && b.kind == Kind::Reader {
                continue;
            }
            if !seen.insert((a.id.clone(), b.id.clone())) {
                continue;
            }
            let (name, a, b) = (name.to_owned(), a.clone(), b.clone());
            violations.push(if a.kind == Kind::Multi || b.kind == Kind::Multi {
                Violation::MultiName { name, a, b }
            } else if a.kind == Kind::Reader || b.kind == Kind::Reader {
                Violation::ReaderBesideWriter { name, a, b }
            } else {
                Violation::Exclusion { name, a, b }
            });
        }
    }
    violations
}

fn permits(history: &History) -> Vec<Violation> {
    let mut violations = Vec::new();
    let names = by_name(history.sections.iter().filter(|s| s.kind == Kind::Permit));
    for (name, list) in names {
        let permits = list.iter().filter_map(|s| s.permits).min().unwrap_or(0);
        // +1 at each start, -1 at each end; at one instant the ends come first.
        let mut steps: Vec<(Nanos, i8, usize)> = Vec::new();
        for (i, s) in list.iter().enumerate().filter(|(_, s)| s.enter < s.end()) {
            steps.push((s.enter, 1, i));
            steps.push((s.end(), -1, i));
        }
        steps.sort();
        let mut holding: Vec<usize> = Vec::new();
        let mut over = false;
        for (at, step, i) in steps {
            if step > 0 {
                holding.push(i);
            } else {
                holding.retain(|&h| h != i);
            }
            // Once per stretch of time over the limit.
            let now_over = holding.len() > permits as usize;
            if now_over && !over {
                violations.push(Violation::Permits {
                    name: name.to_owned(),
                    permits,
                    at,
                    holders: holding.iter().map(|&h| list[h].clone()).collect(),
                });
            }
            over = now_over;
        }
    }
    violations
}

fn terms(history: &History) -> Vec<Violation> {
    let names = by_name(history.sections.iter().filter(|s| s.kind == Kind::Term));
    let mut violations = Vec::new();
    for (name, list) in names {
        for (a, b) in overlapping(&list) {
            violations.push(Violation::Terms {
                name: name.to_owned(),
                a: a.clone(),
                b: b.clone(),
            });
        }
    }
    violations
}

/// Tokens of a name (a lock's fencing tokens, an election's epochs) grow from each holder to the
/// next: a section that began after another of the name ended has the greater token.
fn tokens(history: &History) -> Vec<Violation> {
    let mut violations = Vec::new();
    let mut seen = HashSet::new();
    let tokened = history.sections.iter().filter(|s| s.token.is_some());
    for (name, list) in by_name(tokened) {
        // Locks and terms of one name count apart: an election's keys are its own.
        for terms in [true, false] {
            let list: Vec<&Section> = list
                .iter()
                .copied()
                .filter(|s| (s.kind == Kind::Term) == terms)
                .collect();
            // The highest token among sections ended so far, by end.
            let mut ended: Vec<&Section> = list.clone();
            ended.sort_by_key(|s| s.end());
            let mut highest: Option<&Section> = None;
            let mut next = 0;
            for b in &list {
                while next < ended.len() && ended[next].end() <= b.enter {
                    let e = ended[next];
                    if highest.is_none_or(|h| e.token > h.token) {
                        highest = Some(e);
                    }
                    next += 1;
                }
                if let Some(a) = highest
                    && a.holder != b.holder
                    && b.token <= a.token
                    && seen.insert((a.id.clone(), b.id.clone()))
                {
                    violations.push(Violation::TokenOrder {
                        name: name.to_owned(),
                        a: a.clone(),
                        b: (*b).clone(),
                    });
                }
            }
        }
    }
    violations
}

/// A resource that checks tokens accepts them in increasing order: an accepted write that began
/// after another accepted write returned has a token at least as great, and no two sections'
/// writes are accepted with one token.
fn fences(history: &History) -> Vec<Violation> {
    let mut resources: BTreeMap<&str, Vec<&Write>> = BTreeMap::new();
    for write in history.writes.iter().filter(|w| w.accepted) {
        resources.entry(&write.resource).or_default().push(write);
    }
    let mut violations = Vec::new();
    for (resource, mut list) in resources {
        list.sort_by_key(|w| w.start);
        let mut by_end = list.clone();
        by_end.sort_by_key(|w| w.end);
        let mut highest: Option<&Write> = None;
        let mut next = 0;
        let mut owners: BTreeMap<u64, &Write> = BTreeMap::new();
        for b in &list {
            while next < by_end.len() && by_end[next].end < b.start {
                let e = by_end[next];
                if highest.is_none_or(|h| e.token > h.token) {
                    highest = Some(e);
                }
                next += 1;
            }
            let stale = highest.filter(|a| b.token < a.token);
            let shared = owners
                .get(&b.token)
                .copied()
                .filter(|a| a.section != b.section);
            if let Some(a) = stale.or(shared) {
                violations.push(Violation::FenceOrder {
                    resource: resource.to_owned(),
                    a: a.clone(),
                    b: (*b).clone(),
                });
            }
            owners.entry(b.token).or_insert(b);
        }
    }
    violations
}

/// Every call returns within its bound, unless its own process was paused or killed meanwhile
/// (the nemesis's faults on the process say when).
fn calls(history: &History) -> Vec<Violation> {
    let paused = |call: &Call, until: Nanos| {
        history
            .faults
            .iter()
            .any(|f| f.target == call.process && f.start < until && call.start < f.end)
    };
    let mut violations = Vec::new();
    for call in &history.calls {
        let due = call.start.saturating_add(call.bound);
        match call.end {
            Some(end) if end > due && !paused(call, end) => {
                violations.push(Violation::Late { call: call.clone() });
            }
            None => {
                if let Some(&stopped) = history.stops.get(&call.process)
                    && stopped > due
                    && !paused(call, stopped)
                {
                    violations.push(Violation::Hang {
                        call: call.clone(),
                        stopped,
                    });
                }
            }
            Some(_) => {}
        }
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Fault;

    fn section(id: &str, kind: Kind, names: &[&str], enter: Nanos, exit: Nanos) -> Section {
        Section {
            id: id.into(),
            kind,
            names: names.iter().map(|n| n.to_string()).collect(),
            holder: format!("holder-{id}"),
            token: None,
            permits: None,
            enter,
            exit: Some(exit),
            valid_until: exit + 1000,
        }
    }

    fn with_token(mut s: Section, token: u64) -> Section {
        s.token = Some(token);
        s
    }

    fn of(sections: Vec<Section>) -> History {
        History {
            sections,
            ..History::default()
        }
    }

    fn kinds(history: &History) -> Vec<&'static str> {
        check(history).iter().map(Violation::kind).collect()
    }

    /// A clean history of every kind of section, handing over at shared instants.
    fn clean() -> History {
        let mut history = of(vec![
            with_token(section("m1", Kind::Mutex, &["a"], 0, 100), 1),
            with_token(section("w1", Kind::Writer, &["a"], 100, 200), 2),
            section("r1", Kind::Reader, &["a"], 200, 300),
            section("r2", Kind::Reader, &["a"], 250, 350),
            section("x1", Kind::Multi, &["a", "b"], 350, 400),
            section("m2", Kind::Mutex, &["b"], 0, 350),
            Section {
                permits: Some(2),
                ..section("p1", Kind::Permit, &["s"], 0, 100)
            },
            Section {
                permits: Some(2),
                ..section("p2", Kind::Permit, &["s"], 50, 150)
            },
            Section {
                permits: Some(2),
                ..section("p3", Kind::Permit, &["s"], 100, 200)
            },
            with_token(section("t1", Kind::Term, &["e"], 0, 100), 7),
            with_token(section("t2", Kind::Term, &["e"], 100, 200), 8),
        ]);
        history.writes = vec![
            write("m1", 1, 10, 20, true),
            write("w1", 2, 110, 120, true),
            write("m1", 1, 130, 140, false),
            write("w1", 2, 150, 160, true),
        ];
        history.calls = vec![call("c1", 0, Some(100), 100)];
        history.stops.insert("p".into(), 1000);
        history
    }

    fn write(section: &str, token: u64, start: Nanos, end: Nanos, accepted: bool) -> Write {
        Write {
            section: section.into(),
            resource: "res".into(),
            token,
            start,
            end,
            accepted,
        }
    }

    fn call(id: &str, start: Nanos, end: Option<Nanos>, bound: Nanos) -> Call {
        Call {
            id: id.into(),
            process: "p".into(),
            what: "lock".into(),
            start,
            bound,
            end,
        }
    }

    #[test]
    fn a_clean_history_passes() {
        assert_eq!(check(&clean()), []);
    }

    #[test]
    fn two_mutex_holders_at_once() {
        let mut history = clean();
        history
            .sections
            .push(section("m3", Kind::Mutex, &["a"], 90, 95));
        assert_eq!(kinds(&history), ["exclusion"]);
    }

    #[test]
    fn a_writer_beside_a_mutex() {
        let mut history = clean();
        history
            .sections
            .push(section("w2", Kind::Writer, &["b"], 300, 310));
        assert_eq!(kinds(&history), ["exclusion"]);
    }

    #[test]
    fn a_reader_beside_a_writer() {
        let mut history = clean();
        history
            .sections
            .push(section("r3", Kind::Reader, &["a"], 150, 160));
        assert_eq!(kinds(&history), ["reader-beside-writer"]);
    }

    #[test]
    fn a_multi_name_lock_beside_a_holder_of_its_second_name() {
        let mut history = clean();
        history
            .sections
            .push(section("x2", Kind::Multi, &["c", "b"], 340, 345));
        assert_eq!(kinds(&history), ["multi-name"]);
    }

    #[test]
    fn two_multi_name_locks_sharing_two_names_are_one_violation() {
        let mut history = clean();
        history
            .sections
            .push(section("x2", Kind::Multi, &["a", "b"], 360, 370));
        assert_eq!(kinds(&history), ["multi-name"]);
    }

    #[test]
    fn more_holders_than_permits() {
        let mut history = clean();
        history.sections.push(Section {
            permits: Some(2),
            ..section("p4", Kind::Permit, &["s"], 60, 70)
        });
        assert_eq!(kinds(&history), ["permits"]);
    }

    #[test]
    fn overlapping_terms() {
        let mut history = clean();
        history
            .sections
            .push(with_token(section("t3", Kind::Term, &["e"], 150, 250), 9));
        assert_eq!(kinds(&history), ["terms"]);
    }

    #[test]
    fn a_later_holder_with_a_smaller_token() {
        let mut history = clean();
        history
            .sections
            .push(with_token(section("m3", Kind::Mutex, &["c"], 0, 10), 5));
        history
            .sections
            .push(with_token(section("m4", Kind::Mutex, &["c"], 20, 30), 5));
        assert_eq!(kinds(&history), ["token-order"]);
    }

    #[test]
    fn a_stale_write_accepted() {
        let mut history = clean();
        history.writes.push(write("m1", 1, 170, 180, true));
        assert_eq!(kinds(&history), ["fence-order"]);
    }

    #[test]
    fn one_token_accepted_from_two_sections() {
        let mut history = clean();
        history.writes.push(write("m9", 2, 170, 180, true));
        assert_eq!(kinds(&history), ["fence-order"]);
    }

    #[test]
    fn a_late_call_unless_its_process_was_paused() {
        let mut history = clean();
        history.calls.push(call("c2", 0, Some(300), 100));
        assert_eq!(kinds(&history), ["late"]);
        history.faults.push(Fault {
            kind: "pause-client".into(),
            target: "p".into(),
            start: 50,
            end: 250,
        });
        assert_eq!(kinds(&history), Vec::<&str>::new());
    }

    #[test]
    fn a_call_that_never_returned_in_a_process_that_lived_on() {
        let mut history = clean();
        history.calls.push(call("c2", 0, None, 100));
        assert_eq!(kinds(&history), ["hang"]);
        // In a process killed meanwhile (no stop recorded), nothing can be said.
        history.stops.clear();
        assert_eq!(kinds(&history), Vec::<&str>::new());
    }

    #[test]
    fn an_exit_recorded_after_the_validity_counts_until_the_validity() {
        let mut history = clean();
        // Paused past its validity (110), m3 recorded its exit at 500: it held [100, 110) only,
        // so a holder from 120 on is no violation...
        history.sections.push(Section {
            valid_until: 110,
            ..section("m3", Kind::Mutex, &["c"], 100, 500)
        });
        history
            .sections
            .push(section("m4", Kind::Mutex, &["c"], 120, 130));
        assert_eq!(check(&history), []);
        // ...but one from 105 on is.
        history
            .sections
            .push(section("m5", Kind::Mutex, &["c"], 105, 108));
        assert_eq!(kinds(&history), ["exclusion"]);
    }

    #[test]
    fn a_holder_killed_while_holding_counts_until_its_validity() {
        let mut history = clean();
        history.sections.push(Section {
            exit: None,
            valid_until: 200,
            ..section("m3", Kind::Mutex, &["c"], 100, 0)
        });
        history
            .sections
            .push(section("m4", Kind::Mutex, &["c"], 150, 160));
        assert_eq!(kinds(&history), ["exclusion"]);
    }

    fn samples(history: &mut History, process: &str, seconds: u64, rss_kb: impl Fn(u64) -> u64) {
        for second in (0..=seconds).step_by(2) {
            history.memory.push(Sample {
                process: process.into(),
                at: 1_000 + second * SECOND,
                rss_kb: rss_kb(second),
            });
        }
    }

    #[test]
    fn memory_that_grows_past_the_bound_over_a_long_life() {
        let mut history = clean();
        // Flat but noisy, with a start-up peak: within the bound.
        samples(&mut history, "flat", 300, |s| {
            if s < 10 { 30_000 } else { 20_000 + s % 7 * 300 }
        });
        // A leak of 100 kB a second, a short-lived process that leaks faster, and a process
        // that lived just under the span judged.
        samples(&mut history, "leaky", 300, |s| 20_000 + s * 100);
        samples(&mut history, "short", 100, |s| 20_000 + s * 1_000);
        samples(&mut history, "almost", 118, |s| 20_000 + s * 1_000);
        assert_eq!(kinds(&history), ["memory"]);
        let Violation::Memory { growth } = &check(&history)[0] else {
            unreachable!()
        };
        assert_eq!(growth.process, "leaky");
        assert_eq!((growth.first_kb, growth.last_kb), (26_000, 47_000));
        assert_eq!(growths(&history).len(), 2, "flat and leaky judged");
    }

    #[test]
    fn memory_growth_within_a_quarter_or_4_mib_is_allowed() {
        let growth = |first_kb, last_kb| Growth {
            process: "p".into(),
            first_kb,
            last_kb,
            lived: MEMORY_CHECKED_AFTER,
        };
        assert!(
            !growth(10_000, 14_096).too_much(),
            "4 MiB of a small process"
        );
        assert!(growth(10_000, 14_097).too_much());
        assert!(
            !growth(40_000, 50_000).too_much(),
            "a quarter of a large one"
        );
        assert!(growth(40_000, 50_001).too_much());
    }

    #[test]
    fn sections_of_one_holder_and_empty_sections_never_conflict() {
        let mut history = clean();
        let mut again = section("m3", Kind::Mutex, &["a"], 50, 60);
        again.holder = "holder-m1".into();
        history.sections.push(again);
        // Entered after its validity had ended (paused between the lock and the record).
        history.sections.push(Section {
            valid_until: 40,
            ..section("m4", Kind::Mutex, &["a"], 50, 60)
        });
        assert_eq!(check(&history), []);
    }
}
