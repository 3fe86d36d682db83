//! Warnings about members that do not hold the lock while a command runs under it: which, and
//! why, when it is taken, and again when one fails or comes back.

use redmutex::NodeError;

use crate::exit::say;

/// What has been said about the members of one lock or leadership.
pub struct Members {
    name: String,
    quiet: bool,
    /// The members said to be failing: index and name.
    failing: Vec<(usize, String)>,
}

impl Members {
    /// For the lock or election `name`; `quiet` says nothing at all.
    pub fn new(name: &str, quiet: bool) -> Self {
        Members {
            name: name.to_owned(),
            quiet,
            failing: Vec::new(),
        }
    }

    /// The lock was taken on all members of `total` but `failing`.
    pub fn taken(&mut self, failing: Vec<NodeError>, total: usize) {
        if self.quiet || failing.is_empty() {
            return;
        }
        let holding = total.saturating_sub(failing.len());
        for failure in &failing {
            say(format!(
                "warning: {}: not held on {failure}; it holds on {holding} of {total} members",
                self.name
            ));
        }
        self.failing = failing.iter().map(|f| (f.node, member(f))).collect();
    }

    /// A renewal succeeded on all members but `failing`: says which failed since, and which
    /// came back.
    pub fn renewed(&mut self, failing: Vec<NodeError>) {
        if self.quiet {
            return;
        }
        for failure in &failing {
            if !self.failing.iter().any(|(node, _)| *node == failure.node) {
                say(format!(
                    "warning: {}: a member failed: {failure}",
                    self.name
                ));
            }
        }
        for (node, member) in &self.failing {
            if !failing.iter().any(|f| f.node == *node) {
                say(format!("{}: a member is back: {member}", self.name));
            }
        }
        self.failing = failing.iter().map(|f| (f.node, member(f))).collect();
    }
}

/// A member's name in messages: its address, or its index where the client has none.
fn member(failure: &NodeError) -> String {
    match &failure.address {
        Some(address) => address.clone(),
        None => format!("node {}", failure.node),
    }
}
