//! Writing a process's events: one JSON line per `write` call, so a process killed at any moment
//! leaves every line it finished (and at most one cut short, which the reader skips).

use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::Path;
use std::sync::Mutex;

use crate::history::Event;

/// A history file, shared by a process's tasks.
#[derive(Debug)]
pub struct Recorder {
    file: Mutex<File>,
}

impl Recorder {
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Recorder {
            file: Mutex::new(file),
        })
    }

    /// Appends one event. A failed write ends the run: a history with holes would hide
    /// violations.
    pub fn record(&self, event: &Event) {
        let mut line = serde_json::to_string(event).expect("events serialize");
        line.push('\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(line.as_bytes())
            .expect("the history file takes the line");
    }
}
