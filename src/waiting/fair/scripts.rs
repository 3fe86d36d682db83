//! The fair line on the nodes (`Mutex::with_fair`): its keys, its scripts (a waiter's round, and a
//! release that hands the lock to the head of the line, in `round.lua` and `release.lua`) and the
//! commands that send them.
//!
//! Per name, beside the lock key (in its slot: see `engine::target::beside`, which gives the keys
//! of `order:42` as `{order:42}:line`, ...), every node keeps its line: `{<name>}:line`, a sorted
//! set of the waiters' lock values scored by their tickets; `{<name>}:line:until`, the same members
//! scored by when each entry expires on the node's own clock (milliseconds of `TIME`); and
//! `{<name>}:ticket`, the highest ticket the node ever took. Release and grant notices go out on
//! the channel and with the command the client passes (see `engine::target::channel_arg`). Entries
//! expire unless their waiter renews them, every script sweeps the expired ones first, and the
//! three keys expire with the line's last entry. A node grants the lock only to the waiter with
//! the lowest live ticket it holds (the head), ties broken by value; `waiting::fair` says why that
//! serves waiters in the order they joined.
//!
//! Any of these keys can go missing on its own (evicted under `maxmemory`, deleted by hand), and
//! the scripts go on from whatever is left, repairing as they go: an entry without a deadline is
//! expired (it leaves the line when it reaches the head, unless its waiter renews it first, see
//! `head_of_line`); a lost counter is rebuilt from the tickets still in line, so that no joiner
//! gets a ticket ahead of a waiter's (see `counter`); entries lost from `<name>:line` are places
//! lost on that node, which their waiters' next rounds take again, behind the others. Redis
//! keeps what a script wrote before it failed, so the scripts look up everything a hand-off needs
//! before they write any of it.

use redis::{Cmd, Pipeline};

use crate::engine::target::{Verb, beside};
use crate::nodes::script::{Script, lua};
use crate::nodes::version::{Needs, Version};

/// What a fair mutex's rounds, first tries and hand-offs need of a node: writes after `TIME` in a
/// script, which scripts replicated by their effects allow (the default from 5.0). A fair mutex's
/// extend, and a release without hand-off, are the plain mutex's.
pub(crate) const NEEDS: Needs = Needs::new("fair mutexes", Version::new(5, 0, 0), "5.0");

/// The suffixes of the line's keys beside a name (see [`LineKeys`]).
pub(crate) const SUFFIXES: &[&str] = &[":line", ":line:until", ":ticket", ":line:to"];

/// The line's scripts, which every node loads.
pub(crate) const SCRIPTS: &[Script] = &[ROUND, RELEASE];

/// The highest ticket a round may offer, 2^52: tickets are Lua numbers and sorted-set scores
/// (doubles), exact only up to 2^53, and the counter goes on from the highest one. `ROUND`
/// refuses a higher offer with an error before it writes anything.
pub(crate) const TICKET_LIMIT: u64 = 1 << 52;

/// A waiter's round (`waiting/fair/round.lua`): take the lock if it is ours or our turn, else
/// join or stay in line.
pub(crate) const ROUND: Script = lua!("waiting/fair/round.lua");

/// Marks a notice that hands the lock to a waiter, as opposed to one that frees it (whose
/// payload is the released value; lock values never contain NUL). The fingerprint of the new
/// holder's value, the node's ticket counter and the ticket the new holder's place had follow,
/// separated by spaces.
pub(crate) const GRANT_MARK: u8 = 0;

/// Leaves the line, and releases the lock if it holds our value, handing it to the head of the
/// line (`waiting/fair/release.lua`).
pub(crate) const RELEASE: Script = lua!("waiting/fair/release.lua");

/// The keys of a name's fair line: `{<name>}:line`, `{<name>}:line:until`, `{<name>}:ticket` and
/// `{<name>}:line:to` (where each waiter's grant goes: its client's channel, see
/// `nodes::listener::grant_channel`).
pub(crate) struct LineKeys {
    line: String,
    until: String,
    ticket: String,
    to: String,
}

impl LineKeys {
    pub(crate) fn new(name: &str) -> LineKeys {
        LineKeys {
            line: beside(name, ":line"),
            until: beside(name, ":line:until"),
            ticket: beside(name, ":ticket"),
            to: beside(name, ":line:to"),
        }
    }
}

/// A fair waiter's round on `name` (see `round.lua`), with the waiters' `mark` of the member it
/// goes to (see `engine::target::waiters_key`), whose grants go to `grants` (its client's
/// channel), and whose hand-off to a waiter without one publishes with `notices` (the command and
/// the channel, where the member needs them: see `engine::target::channel_arg`).
pub(crate) fn round(
    verb: Verb,
    name: &str,
    keys: &LineKeys,
    mark: &str,
    (value, millis, ticket): (&str, u64, u64),
    grants: &str,
    notices: Option<(&str, &str)>,
) -> Cmd {
    let (millis, ticket) = (millis.to_string(), ticket.to_string());
    let script = verb.script(&ROUND);
    match notices {
        None => line_cmd(
            script,
            verb,
            name,
            (keys, mark),
            &[value, &millis, &ticket, grants],
        ),
        Some((publish, channel)) => {
            let args = [value, &millis, &ticket, grants, publish, channel];
            line_cmd(script, verb, name, (keys, mark), &args)
        }
    }
}

/// A fair mutex's release, which hands the lock to the head of the line (see `release.lua`). On
/// a standalone server (`cluster` is `None`) the request of a plain release with notice, the name
/// and the value alone: the script makes the rest from the name where it needs them. On a cluster
/// the line's keys and the waiters' mark, and the command and channel of notices.
pub(crate) fn release(
    verb: Verb,
    name: &str,
    value: &str,
    cluster: Option<(&LineKeys, &str, (&str, &str))>,
) -> Cmd {
    let script = verb.script(&RELEASE);
    match cluster {
        None => {
            let mut cmd = Cmd::with_capacity(5, 32 + script.len() + name.len() + value.len());
            cmd.arg(verb.word()).arg(script).arg(1).arg(name).arg(value);
            cmd
        }
        Some((keys, mark, (publish, channel))) => {
            line_cmd(script, verb, name, (keys, mark), &[value, publish, channel])
        }
    }
}

/// A fair mutex's plain first try: `set` (the mutex's `SET NX`), then `EXISTS` on the name's line,
/// in one write (see `waiting::fair`). Run in this order, the `EXISTS` sees every waiter that
/// stood in line before the `SET`: entries leave a line only when their waiter is served, leaves
/// or dies.
pub(crate) fn entry(set: Cmd, keys: &LineKeys) -> Pipeline {
    let mut pipeline = Pipeline::with_capacity(2);
    pipeline.add_command(set);
    pipeline.cmd("EXISTS").arg(&keys.line);
    pipeline
}

/// A script over the lock key, its fair line and the waiters' mark.
fn line_cmd(
    script: &str,
    verb: Verb,
    name: &str,
    (keys, mark): (&LineKeys, &str),
    args: &[&str],
) -> Cmd {
    let mut cmd = Cmd::with_capacity(9 + args.len(), 160 + script.len() + 7 * name.len());
    cmd.arg(verb.word())
        .arg(script)
        .arg(6)
        .arg(name)
        .arg(&keys.line)
        .arg(&keys.until)
        .arg(&keys.ticket)
        .arg(mark)
        .arg(&keys.to);
    for arg in args {
        cmd.arg(*arg);
    }
    cmd
}

/// The fingerprint a grant notice names a waiter by: the SHA1 of its value, in hex, as the
/// release script's `redis.sha1hex` writes it.
pub(crate) fn fingerprint(value: &str) -> String {
    sha1_smol::Sha1::from(value).digest().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_lowercase_sha1_hex() {
        // SHA1("abc"), as `redis.sha1hex('abc')` returns it.
        assert_eq!(
            fingerprint("abc"),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }

    #[test]
    fn the_scripts_keep_tickets_within_the_limit() {
        let limit = format!(" {TICKET_LIMIT} ");
        assert!(ROUND.text().contains(&format!("offer >{limit}")));
        assert!(ROUND.text().contains(&format!("counter <={limit}then")));
        assert!(RELEASE.text().contains(&format!("counter <={limit}then")));
    }

    #[test]
    fn grants_are_marked_as_the_scripts_mark_them() {
        assert_eq!(GRANT_MARK, b'\0');
        assert!(RELEASE.text().contains(r"'\0' .. redis.sha1hex(head)"));
        assert!(ROUND.text().contains(r"'\0' .. redis.sha1hex(head)"));
        // Where no channel is given (a standalone server), the listeners' one.
        for script in [RELEASE, ROUND] {
            assert!(script.text().contains(&format!(
                "'{}' .. KEYS[1]",
                crate::nodes::listener::NOTICE_PREFIX
            )));
        }
    }
}
