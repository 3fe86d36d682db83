//! Exit codes (the BSD `sysexits` numbers where one fits), and how library errors map to them.

use std::io::{self, Write};
use std::process::ExitCode;

use redmutex::{Error, NodeError, NodeErrorKind};

use crate::redact::redact;

/// `doctor`: a check failed.
pub const CHECK_FAILED: u8 = 1;
/// Usage or configuration error (`EX_USAGE`).
pub const USAGE: u8 = 64;
/// No quorum of nodes reachable (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// The lock was lost while the command ran (`EX_SOFTWARE`).
pub const LOST: u8 = 70;
/// The machine refused something redmutex needs (a runtime, a signal handler) (`EX_OSERR`).
pub const OS_ERROR: u8 = 71;
/// The nodes refused the credentials in `--nodes`, so that no quorum is left (`EX_NOPERM`).
pub const NO_PERMISSION: u8 = 77;
/// The lock is held elsewhere, or the wait ran out (`EX_TEMPFAIL`).
pub const HELD: u8 = 75;
/// The command could not be started, as shells report it.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found, as shells report it.
pub const NOT_FOUND: u8 = 127;

/// Prints `message` on stderr, each line prefixed, with any credentials hidden.
pub fn say(message: impl AsRef<str>) {
    let mut out = String::new();
    for line in redact(message.as_ref()).lines() {
        out.push_str("redmutex: ");
        out.push_str(line);
        out.push('\n');
    }
    // Not eprintln!, which panics when stderr is closed.
    let _ = io::stderr().write_all(out.as_bytes());
}

/// Prints `text` on stdout, with any credentials hidden. A closed stdout (`| head`) is no error.
pub fn show(text: impl AsRef<str>) {
    let _ = writeln!(io::stdout(), "{}", redact(text.as_ref()));
}

/// Prints `message` and gives `code`.
pub fn fail(code: u8, message: impl AsRef<str>) -> ExitCode {
    say(message);
    ExitCode::from(code)
}

/// The exit code of a failed acquisition: 75 when the lock is held (or the nodes that answered
/// were split between holders), 77 when nodes refused the credentials and too few are left for
/// a quorum, 69 when too few nodes answered at all, 64 for bad settings.
pub fn acquire_code(error: &Error) -> u8 {
    if refused_authentication(error).is_some() {
        return NO_PERMISSION;
    }
    if let Error::NoQuorum { failures, .. } = error
        && same_server(failures).is_some()
    {
        return USAGE;
    }
    match error {
        Error::Taken { .. } => HELD,
        Error::NoQuorum {
            quorum,
            total,
            failures,
            ..
        } => {
            let silent = failures
                .iter()
                .filter(|f| !matches!(f.kind, NodeErrorKind::Taken | NodeErrorKind::Missing))
                .count();
            held_or_unavailable(*quorum, *total, silent)
        }
        Error::Config { .. } => USAGE,
        // Expired: the nodes answered too slowly for any validity to be left.
        _ => UNAVAILABLE,
    }
}

/// After an attempt without a quorum: held elsewhere if a quorum of nodes answered (some with
/// another owner's value), else unavailable. `silent` nodes gave no definite answer.
fn held_or_unavailable(quorum: usize, total: usize, silent: usize) -> u8 {
    if total.saturating_sub(silent) >= quorum {
        HELD
    } else {
        UNAVAILABLE
    }
}

/// Two `--nodes` entries that turned out, once connected, to reach one server (aliases such as
/// `localhost` and `127.0.0.1`, or two seeds of one cluster): the library counts only the first
/// one connected, and the list is to be fixed (exit 64), as for one address listed twice.
pub fn same_server(failures: &[NodeError]) -> Option<String> {
    failures.iter().find_map(|failure| {
        let NodeErrorKind::SameServer {
            entry,
            address,
            run_id,
        } = &failure.kind
        else {
            return None;
        };
        let this = failure.address.as_deref().unwrap_or("a cluster client");
        let mut entries = [(*entry, address.as_str()), (failure.node + 1, this)];
        entries.sort_unstable();
        let [(first, first_address), (second, second_address)] = entries;
        Some(format!(
            "--nodes: entry {first} ({first_address}) and entry {second} ({second_address}) \
             reach the same server (run_id {run_id}...): each member must be another server, or \
             its vote would count twice"
        ))
    })
}

/// The exit code of a failed status or forced unlock.
pub fn query_code(error: &Error) -> u8 {
    match error {
        _ if refused_authentication(error).is_some() => NO_PERMISSION,
        Error::Config { .. } => USAGE,
        _ => UNAVAILABLE,
    }
}

/// When nodes refused the credentials (`NOAUTH`, `WRONGPASS`) so many that the rest cannot make
/// a quorum: how many did, of how many.
fn refused_authentication(error: &Error) -> Option<(usize, usize)> {
    let Error::NoQuorum {
        quorum,
        total,
        failures,
        ..
    } = error
    else {
        return match error {
            Error::Lost { cause } | Error::WaitedOut { last: cause, .. } => {
                refused_authentication(cause)
            }
            _ => None,
        };
    };
    let refused = failures
        .iter()
        .filter(|f| f.kind.is_authentication_refusal())
        .count();
    (refused > 0 && total.saturating_sub(refused) < *quorum).then_some((refused, *total))
}

/// `message` (about `error`) with what to do next: for two entries that are one server, which;
/// for credentials the nodes refused, where they come from; for nodes that did not answer, the command that checks each.
pub fn advised(message: String, error: &Error) -> String {
    if let Error::NoQuorum { failures, .. } = error
        && let Some(same) = same_server(failures)
    {
        return format!("{message}\n{same}");
    }
    if let Some((refused, total)) = refused_authentication(error) {
        return format!(
            "{message}\nauthentication refused by {refused} of {total} nodes (NOAUTH or \
             WRONGPASS): check the user and password in the --nodes URLs, then run \
             `redmutex doctor`"
        );
    }
    match error {
        Error::NoQuorum { .. } | Error::WaitedOut { .. } if acquire_code(error) == UNAVAILABLE => {
            format!("{message}\nrun `redmutex doctor` to check each node")
        }
        _ => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_or_unreachable() {
        assert_eq!(acquire_code(&Error::Taken { nodes: vec![0, 1] }), HELD);
        assert_eq!(acquire_code(&Error::Expired), UNAVAILABLE);
        // 5 nodes, 2 taken, 2 ours, 1 down: a quorum answered, the lock is contended.
        assert_eq!(held_or_unavailable(3, 5, 1), HELD);
        // 3 of 5 silent: nobody can lock.
        assert_eq!(held_or_unavailable(3, 5, 3), UNAVAILABLE);
        assert_eq!(held_or_unavailable(2, 3, 1), HELD);
        assert_eq!(held_or_unavailable(2, 3, 2), UNAVAILABLE);
    }
}
