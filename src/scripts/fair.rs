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

use std::sync::LazyLock;

/// The scripts share these pieces of Lua; each script runs on its own, so each carries them.
///
/// `now`, the node's clock in milliseconds, and the sweep of expired entries.
macro_rules! clock_and_sweep {
    () => {
        r#"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], gone)
  redis.call('ZREM', KEYS[3], gone)
end
"#
    };
}

/// `head_of_line()`: the head of the line, its ticket, and how long its entry has left (`nil`
/// for an empty line), looked up before anything that depends on them is written. An entry
/// without a deadline (the deadlines' key, or the entry in it, was evicted or deleted) counts as
/// expired and leaves the line here, as the sweep would have taken it out: the sweep finds
/// entries by their deadlines, so nothing else would ever take it out, and every hand-off would
/// fail on it while the line jams behind it.
macro_rules! head_of_line {
    () => {
        r#"
local function head_of_line()
  while true do
    local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
    if not head[1] then return nil end
    local left = math.floor((tonumber(redis.call('ZSCORE', KEYS[3], head[1])) or now) - now)
    if left >= 1 then return head[1], tonumber(head[2]), left end
    redis.call('ZREM', KEYS[2], head[1])
    redis.call('ZREM', KEYS[3], head[1])
  end
end
"#
    };
}

/// `counter()`: the highest ticket the node gave, and whether its counter said so. Where the
/// counter is gone (evicted, deleted) or holds no ticket (see [`TICKET_LIMIT`]), the highest
/// ticket still in line stands in for it: those are the waiters a joiner must stay behind, and
/// `stand` writes it back. A counter that is there is never below a ticket in line: entries
/// join the line only through `stand`, which raises it first.
macro_rules! counter {
    () => {
        r#"
local function counter()
  local counter = tonumber(redis.call('GET', KEYS[4]) or '')
  if counter and counter >= 0 and counter <= 4503599627370496 then
    return math.floor(counter), true
  end
  return tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2] or '0') or 0, false
end
"#
    };
}

/// `hand_off(head, place, left)`: sets the key to the head's value for what is left of its
/// entry, takes the head out of the line, and names it in a grant notice, with the ticket its
/// place had: a round of the head's may pass the key on before the head reads the notice, and
/// put it back in line with another ticket (see `waiting::fair::Standing::handed`). Its
/// arguments come from `head_of_line`, so it cannot fail halfway.
macro_rules! hand_off {
    () => {
        r#"
local function hand_off(head, place, left)
  local notice = '\0' .. redis.sha1hex(head) .. ' ' .. string.format('%d', (counter())) .. ' '
    .. string.format('%d', place)
  redis.call('SET', KEYS[1], head, 'PX', left)
  redis.call('ZREM', KEYS[2], head)
  redis.call('ZREM', KEYS[3], head)
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], notice)
end
"#
    };
}

/// `stand(ticket)`: puts our entry (`ARGV[1]`) in line with `ticket`, renews it for an expiry
/// (`ARGV[2]`), keeps the counter at or above it (and above the line, if it was lost), and keeps
/// the line's keys as long as its last entry.
macro_rules! stand {
    () => {
        r#"
local function stand(ticket)
  local latest, kept = counter()
  redis.call('ZADD', KEYS[2], ticket, ARGV[1])
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
  if ticket > latest or not kept then
    redis.call('SET', KEYS[4], string.format('%d', math.max(ticket, latest)))
  end
  local last = tonumber(redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2])
  for i = 2, 4 do
    redis.call('PEXPIREAT', KEYS[i], last)
  end
end
"#
    };
}

/// Where nobody stands in line on this node (no line key: an empty sorted set does not exist),
/// nobody can be ahead of us, so the round is a plain mutex's acquire: `SET NX`, or renewing the
/// key if it is already ours. This costs a round on a name that is free again two commands on
/// the node instead of the line's seven; the script below decides exactly the same in that case.
/// A key held by another sends us to the line.
macro_rules! round_without_line {
    () => {
        r#"
if redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {1, 0} end
  if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, 0}
  end
end
"#
    };
}

/// Where nobody stands in line on this node, a release is the plain one, with its notice: the
/// same as the script below decides in that case, in three or four commands instead of eight.
macro_rules! release_without_line {
    () => {
        r#"
if redis.call('EXISTS', KEYS[2]) == 0 then
  local current = redis.call('GET', KEYS[1])
  if not current then return 0 end
  if current ~= ARGV[1] then return -1 end
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], ARGV[1])
  return 1
end
"#
    };
}

/// The highest ticket a round may offer, 2^52: tickets are Lua numbers and sorted-set scores
/// (doubles), exact only up to 2^53, and the counter goes on from the highest one. `ROUND`
/// refuses a higher offer with an error before it writes anything.
pub(crate) const TICKET_LIMIT: u64 = 1 << 52;

/// A waiter's round: take the lock if it is ours or our turn, else join or stay in line.
///
/// `KEYS[1]` = name, `KEYS[2]` = line, `KEYS[3]` = line expiries, `KEYS[4]` = ticket counter;
/// `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds (of the lock and of the entry),
/// `ARGV[3]` = the ticket this waiter offers (its ticket in line, once it has one).
///
/// A waiter not in line joins with its offer or, if the node gave that ticket or a higher one
/// already, with the next one above them: a later joiner never gets a ticket at or below an
/// earlier one's. A waiter in line whose offer is above its ticket moves back to the offer (so
/// that its tickets agree on every node); it never moves forward. A waiter that holds the key
/// while a waiter ahead of it (by ticket, then value) is in line (it took the key when the line
/// was empty, or it moved back since) passes the key to the head and takes its place behind.
/// Replies `{1, 0}` when the lock is ours (taken now, or handed to us earlier and extended now),
/// and `{0, ticket}` when we wait in line, with our ticket on this node (our entry renewed for
/// another expiry).
pub(crate) const ROUND: &str = concat!(
    round_without_line!(),
    r#"
local offer = tonumber(ARGV[3])
if not offer or offer < 1 or offer > 4503599627370496 or offer % 1 ~= 0 then
  return redis.error_reply('ERR redmutex: a ticket is a whole number from 1 to 2^52')
end
"#,
    clock_and_sweep!(),
    head_of_line!(),
    counter!(),
    hand_off!(),
    stand!(),
    r#"
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  local head, place, left = head_of_line()
  if head and (place < offer or (place == offer and head < ARGV[1])) then
    hand_off(head, place, left)
    stand(offer)
    return {0, offer}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {1, 0}
end
if not current then
  local head = head_of_line()
  if not head or head == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('ZREM', KEYS[3], ARGV[1])
    return {1, 0}
  end
end
local ticket = redis.call('ZSCORE', KEYS[2], ARGV[1])
if ticket then
  ticket = math.max(tonumber(ticket), offer)
else
  ticket = math.max(offer, counter() + 1)
end
stand(ticket)
return {0, ticket}
"#
);

/// Marks a notice that hands the lock to a waiter, as opposed to one that frees it (whose
/// payload is the released value; lock values never contain NUL). The fingerprint of the new
/// holder's value, the node's ticket counter and the ticket the new holder's place had follow,
/// separated by spaces.
pub(crate) const GRANT_MARK: u8 = 0;

/// Leaves the line, and releases the lock if it holds our value, handing it to the head of the
/// line. `KEYS` as for [`ROUND`]; `ARGV[1]` = value.
///
/// The hand-off sets the key to the head's value for what is left of the head's entry: the head
/// renewed its entry at a moment it knows, so it knows how long the key lives without asking
/// (see `waiting::fair`). The notice names the head by the SHA1 of its value, never the value
/// itself (a capability), and carries the node's ticket counter (a hint for later joiners) and
/// the ticket the head's place had. Without a head the notice is the plain release notice.
/// Replies as `RELEASE` does.
pub(crate) const RELEASE: &str = concat!(
    release_without_line!(),
    clock_and_sweep!(),
    head_of_line!(),
    counter!(),
    hand_off!(),
    r#"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
local head, place, left = head_of_line()
if head then
  hand_off(head, place, left)
else
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], ARGV[1])
end
return 1
"#
);

/// SHA1 digests for EVALSHA, computed once per process.
pub(crate) struct Digests {
    pub round: String,
    pub release: String,
}

pub(crate) static DIGESTS: LazyLock<Digests> = LazyLock::new(|| Digests {
    round: redis::Script::new(ROUND).get_hash().to_owned(),
    release: redis::Script::new(RELEASE).get_hash().to_owned(),
});

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
        assert!(ROUND.contains(&format!("offer >{limit}")));
        assert!(ROUND.contains(&format!("counter <={limit}then")));
        assert!(RELEASE.contains(&format!("counter <={limit}then")));
    }

    #[test]
    fn grants_are_marked_as_the_scripts_mark_them() {
        assert_eq!(GRANT_MARK, b'\0');
        assert!(RELEASE.contains(r"'\0' .. redis.sha1hex(head)"));
        assert!(ROUND.contains(r"'\0' .. redis.sha1hex(head)"));
        assert!(RELEASE.contains(&format!("'{}' .. KEYS[1]", super::super::NOTICE_PREFIX)));
    }
}
