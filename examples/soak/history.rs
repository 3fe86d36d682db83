//! What a soak run records: events on CLOCK_MONOTONIC, one JSON object a line, each written by the
//! process that saw it; and the operations they make up once every process's lines are merged.
//!
//! A critical section is an `enter` line written as soon as the lock is held, `extend` lines as its
//! validity moves, and an `exit` line when its holder lets go. A holder killed while holding
//! leaves an `enter` without an `exit`: its section is judged until its last recorded validity.

use std::collections::HashMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Nanoseconds on CLOCK_MONOTONIC, which every process on one machine shares.
pub type Nanos = u64;

/// The current time on CLOCK_MONOTONIC.
pub fn monotonic() -> Nanos {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    seconds * 1_000_000_000 + nanos
}

/// Turns this process's `Instant`s (a lock's `valid_until`) into CLOCK_MONOTONIC nanoseconds: on
/// Linux `Instant` reads that clock, but keeps the number to itself, so one reading of both
/// anchors the conversion.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    instant: Instant,
    nanos: Nanos,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            instant: Instant::now(),
            nanos: monotonic(),
        }
    }

    pub fn nanos(&self, at: Instant) -> Nanos {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.nanos.saturating_add(nanos_of(after)),
            None => self
                .nanos
                .saturating_sub(nanos_of(self.instant.duration_since(at))),
        }
    }
}

fn nanos_of(duration: std::time::Duration) -> Nanos {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// What kind of section a holder entered, which says whom it excludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A mutex (plain, fail-fast, fenced, fair, ...) on one name: excludes every other holder of it.
    Mutex,
    /// A multi-name mutex: excludes every holder of any of its names.
    Multi,
    /// A read-write lock's writer: a mutex on the name.
    Writer,
    /// A read-write lock's reader: excludes writers and mutexes, not other readers.
    Reader,
    /// One permit of a semaphore of `permits`.
    Permit,
    /// A leader's term in an election.
    Term,
}

impl Kind {
    /// Whether sections of this kind live in the names shared by mutexes and read-write locks.
    pub fn is_lock(self) -> bool {
        matches!(
            self,
            Kind::Mutex | Kind::Multi | Kind::Writer | Kind::Reader
        )
    }
}

/// One line of a history file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// A holder entered a critical section (the acquiring call returned).
    Enter {
        id: String,
        kind: Kind,
        names: Vec<String>,
        holder: String,
        /// The fencing token, or the term's epoch.
        token: Option<u64>,
        /// A semaphore's number of permits.
        permits: Option<u32>,
        at: Nanos,
        valid_until: Nanos,
    },
    /// The section's validity moved (an extension, a keep-alive's or a leader's renewal).
    Extend { id: String, valid_until: Nanos },
    /// The holder let go (it called unlock, or saw its lock lost).
    Exit { id: String, at: Nanos },
    /// A write through `fenced_set` to a resource that checks tokens.
    Write {
        section: String,
        resource: String,
        token: u64,
        start: Nanos,
        end: Nanos,
        accepted: bool,
    },
    /// A call to the library began, to return within `bound` nanoseconds.
    Call {
        id: String,
        process: String,
        what: String,
        start: Nanos,
        bound: Nanos,
    },
    /// That call returned.
    Return { id: String, end: Nanos, ok: bool },
    /// A process stopped on its own (not killed): its calls without a return never returned.
    Stop { process: String, at: Nanos },
    /// A fault injected by the nemesis on `target` (a node or a process) over `[start, end]`.
    Fault {
        kind: String,
        target: String,
        start: Nanos,
        end: Nanos,
    },
    /// A process's resident memory at `at`.
    Memory {
        process: String,
        at: Nanos,
        rss_kb: u64,
    },
}

/// A critical section, from its holder's point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub id: String,
    pub kind: Kind,
    pub names: Vec<String>,
    pub holder: String,
    pub token: Option<u64>,
    pub permits: Option<u32>,
    pub enter: Nanos,
    /// `None` when the holder never said it let go (killed while holding, or still holding at the
    /// end of the run).
    pub exit: Option<Nanos>,
    /// The last validity the holder recorded.
    pub valid_until: Nanos,
}

impl Section {
    /// Until when the section counts: its exit, but never past its validity. A holder that
    /// recorded its exit late (it was paused, say) could rely on the lock only until then.
    pub fn end(&self) -> Nanos {
        self.exit
            .map_or(self.valid_until, |exit| exit.min(self.valid_until))
    }

    /// Whether the two sections were held at a common instant (half-open: one that ends as the
    /// other begins does not overlap it).
    pub fn overlaps(&self, other: &Section) -> bool {
        self.enter < self.end()
            && other.enter < other.end()
            && self.enter < other.end()
            && other.enter < self.end()
    }
}

/// A fenced write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub section: String,
    pub resource: String,
    pub token: u64,
    pub start: Nanos,
    pub end: Nanos,
    pub accepted: bool,
}

/// A call to the library.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub id: String,
    pub process: String,
    pub what: String,
    pub start: Nanos,
    pub bound: Nanos,
    /// When it returned, if it did.
    pub end: Option<Nanos>,
}

/// A fault, as the nemesis injected it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: String,
    pub target: String,
    pub start: Nanos,
    pub end: Nanos,
}

/// A sample of a process's resident memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub process: String,
    pub at: Nanos,
    pub rss_kb: u64,
}

/// Every operation of a run, merged from all processes' events.
#[derive(Debug, Clone, Default)]
pub struct History {
    pub sections: Vec<Section>,
    pub writes: Vec<Write>,
    pub calls: Vec<Call>,
    /// When each process that stopped on its own stopped.
    pub stops: HashMap<String, Nanos>,
    pub faults: Vec<Fault>,
    pub memory: Vec<Sample>,
}

impl History {
    /// Puts events together into operations. Events about an unknown section or call (their
    /// process was killed before it wrote the first line) are dropped.
    pub fn from_events<I: IntoIterator<Item = Event>>(events: I) -> History {
        let mut history = History::default();
        let mut sections: HashMap<String, usize> = HashMap::new();
        let mut calls: HashMap<String, usize> = HashMap::new();
        let mut later = Vec::new();
        for event in events {
            match event {
                Event::Enter {
                    id,
                    kind,
                    names,
                    holder,
                    token,
                    permits,
                    at,
                    valid_until,
                } => {
                    sections.insert(id.clone(), history.sections.len());
                    history.sections.push(Section {
                        id,
                        kind,
                        names,
                        holder,
                        token,
                        permits,
                        enter: at,
                        exit: None,
                        valid_until,
                    });
                }
                Event::Call {
                    id,
                    process,
                    what,
                    start,
                    bound,
                } => {
                    calls.insert(id.clone(), history.calls.len());
                    history.calls.push(Call {
                        id,
                        process,
                        what,
                        start,
                        bound,
                        end: None,
                    });
                }
                Event::Write {
                    section,
                    resource,
                    token,
                    start,
                    end,
                    accepted,
                } => history.writes.push(Write {
                    section,
                    resource,
                    token,
                    start,
                    end,
                    accepted,
                }),
                Event::Memory {
                    process,
                    at,
                    rss_kb,
                } => history.memory.push(Sample {
                    process,
                    at,
                    rss_kb,
                }),
                Event::Stop { process, at } => {
                    history.stops.insert(process, at);
                }
                Event::Fault {
                    kind,
                    target,
                    start,
                    end,
                } => history.faults.push(Fault {
                    kind,
                    target,
                    start,
                    end,
                }),
                // Files are merged in any order: apply these once every start is known.
                event @ (Event::Extend { .. } | Event::Exit { .. } | Event::Return { .. }) => {
                    later.push(event);
                }
            }
        }
        for event in later {
            match event {
                Event::Extend { id, valid_until } => {
                    if let Some(&i) = sections.get(&id) {
                        let section = &mut history.sections[i];
                        section.valid_until = section.valid_until.max(valid_until);
                    }
                }
                Event::Exit { id, at } => {
                    if let Some(&i) = sections.get(&id) {
                        history.sections[i].exit = Some(at);
                    }
                }
                Event::Return { id, end, .. } => {
                    if let Some(&i) = calls.get(&id) {
                        history.calls[i].end = Some(end);
                    }
                }
                _ => {}
            }
        }
        history
    }

    /// Reads JSON lines; a last line cut short by a kill is skipped, any other bad line is an
    /// error.
    pub fn parse_lines(text: &str) -> Result<Vec<Event>, serde_json::Error> {
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let mut events = Vec::with_capacity(lines.len());
        for (i, line) in lines.iter().enumerate() {
            match serde_json::from_str(line) {
                Ok(event) => events.push(event),
                Err(_) if i + 1 == lines.len() => {}
                Err(error) => return Err(error),
            }
        }
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_counts_until_its_exit_or_its_validity_whichever_is_first() {
        let mut section = Section {
            id: "s".into(),
            kind: Kind::Mutex,
            names: vec!["a".into()],
            holder: "h".into(),
            token: None,
            permits: None,
            enter: 10,
            exit: Some(20),
            valid_until: 30,
        };
        assert_eq!(section.end(), 20);
        section.exit = Some(40); // recorded after a pause past the validity
        assert_eq!(section.end(), 30);
        section.exit = None; // killed while holding
        assert_eq!(section.end(), 30);
    }

    #[test]
    fn events_round_trip_and_merge_in_any_order() {
        let events = vec![
            Event::Exit {
                id: "s".into(),
                at: 25,
            },
            Event::Extend {
                id: "s".into(),
                valid_until: 50,
            },
            Event::Enter {
                id: "s".into(),
                kind: Kind::Writer,
                names: vec!["a".into()],
                holder: "h".into(),
                token: Some(3),
                permits: None,
                at: 10,
                valid_until: 20,
            },
        ];
        let text: String = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        // A kill cut the last line short.
        let text = text + "{\"ev\":\"ex";
        let parsed = History::parse_lines(&text).unwrap();
        assert_eq!(parsed, events);
        let history = History::from_events(parsed);
        assert_eq!(history.sections.len(), 1);
        assert_eq!(history.sections[0].exit, Some(25));
        assert_eq!(history.sections[0].valid_until, 50);
        assert_eq!(history.sections[0].end(), 25);
    }

    #[test]
    fn instants_convert_to_the_monotonic_clock_by_their_distance_from_the_anchor() {
        let clock = Clock::new();
        let later = clock.instant + std::time::Duration::from_millis(1500);
        assert_eq!(clock.nanos(clock.instant), clock.nanos);
        assert_eq!(clock.nanos(later), clock.nanos + 1_500_000_000);
    }
}
