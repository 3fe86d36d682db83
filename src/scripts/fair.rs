//! The scripts of a fair line (`Mutex::with_fair`): a waiter's round, and a release that hands the
//! lock to the head of the line.
//!
//! Per name, beside the lock key, every node keeps its line: `<name>:line`, a sorted set of the
//! waiters' lock values scored by their tickets; `<name>:line:until`, the same members scored by
//! when each entry expires on the node's own clock (milliseconds of `TIME`); and
//! `<name>:ticket`, the highest ticket the node ever took. Entries expire unless their waiter
//! renews them, every script sweeps the expired ones first, and the three keys expire with the
//! line's last entry. A node grants the lock only to the waiter with the lowest live ticket it
//! holds (the head), ties broken by value; `waiting::fair` says why that serves waiters in the
//! order they joined.
//!
//! Any of these keys can go missing on its own (evicted under `maxmemory`, deleted by hand), and
//! the scripts go on from whatever is left, repairing as they go: an entry without a deadline is
//! expired (it leaves the line when it reaches the head, unless its waiter renews it first, see
//! `head_of_line`); a lost counter is rebuilt from the tickets still in line, so that no joiner
//! gets a ticket ahead of a waiter's (see `counter`); entries lost from `<name>:line` are places
//! lost on that node, which their waiters' next rounds take again, behind the others. Redis
//! keeps what a script wrote before it failed, so the scripts look up everything a hand-off needs
//! before they write any of it.

use crate::nodes::script::{Script, lua};

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
        assert!(RELEASE.text().contains(&format!(
            "'{}' .. KEYS[1]",
            crate::nodes::listener::NOTICE_PREFIX
        )));
    }
}
