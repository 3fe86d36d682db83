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

/// `hand_off(head)`: sets the key (deleted by the caller) to the head's value for what is left
/// of the head's entry, takes the head out of the line, and names it in a grant notice, with the
/// ticket its place had: a round of the head's may pass the key on before the head reads the
/// notice, and put it back in line with another ticket (see `waiting::fair::Standing::handed`).
macro_rules! hand_off {
    () => {
        r#"
local function hand_off(head)
  local left = tonumber(redis.call('ZSCORE', KEYS[3], head)) - now
  local place = tonumber(redis.call('ZSCORE', KEYS[2], head))
  redis.call('SET', KEYS[1], head, 'PX', left)
  redis.call('ZREM', KEYS[2], head)
  redis.call('ZREM', KEYS[3], head)
  local counter = redis.call('GET', KEYS[4]) or '0'
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1],
    '\0' .. redis.sha1hex(head) .. ' ' .. counter .. ' ' .. string.format('%d', place))
end
"#
    };
}

/// `stand(ticket)`: puts our entry (`ARGV[1]`) in line with `ticket`, renews it for an expiry
/// (`ARGV[2]`), keeps the counter at or above it, and keeps the line's keys as long as its last
/// entry.
macro_rules! stand {
    () => {
        r#"
local function stand(ticket)
  redis.call('ZADD', KEYS[2], ticket, ARGV[1])
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
  if ticket > tonumber(redis.call('GET', KEYS[4]) or '0') then
    redis.call('SET', KEYS[4], ticket)
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
    clock_and_sweep!(),
    hand_off!(),
    stand!(),
    r#"
local offer = tonumber(ARGV[3])
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if head[1] and (tonumber(head[2]) < offer or (tonumber(head[2]) == offer and head[1] < ARGV[1])) then
    hand_off(head[1])
    stand(offer)
    return {0, offer}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  return {1, 0}
end
if not current then
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
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
  ticket = math.max(offer, tonumber(redis.call('GET', KEYS[4]) or '0') + 1)
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
/// the ticket the head's place had. Without a head the notice is the plain release notice. Replies as `RELEASE` does.
pub(crate) const RELEASE: &str = concat!(
    release_without_line!(),
    clock_and_sweep!(),
    hand_off!(),
    r#"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head then
  hand_off(head)
else
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
    fn grants_are_marked_as_the_scripts_mark_them() {
        assert_eq!(GRANT_MARK, b'\0');
        assert!(RELEASE.contains(r"'\0' .. redis.sha1hex(head)"));
        assert!(ROUND.contains(r"'\0' .. redis.sha1hex(head)"));
        assert!(RELEASE.contains(&format!("'{}' .. KEYS[1]", super::super::NOTICE_PREFIX)));
    }
}
