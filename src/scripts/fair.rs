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

/// A waiter's round: take the lock if it is ours or our turn, else join or stay in line.
///
/// `KEYS[1]` = name, `KEYS[2]` = line, `KEYS[3]` = line expiries, `KEYS[4]` = ticket counter;
/// `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds (of the lock and of the entry),
/// `ARGV[3]` = the ticket this waiter offers.
///
/// A waiter not in line joins with its offer or, if the node took that ticket or a higher one
/// already, with the next one above them: a later joiner never gets a ticket at or below an
/// earlier one's. A waiter in line whose offer is above its ticket moves back to the offer (so
/// that its tickets agree on every node); it never moves forward. Replies `{1, 0}` when the lock
/// is ours (taken now, or handed to us earlier and extended now), and `{0, ticket}` when we wait in
/// line, with our ticket on this node (our entry renewed for another expiry).
pub(crate) const ROUND: &str = r#"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], gone)
  redis.call('ZREM', KEYS[3], gone)
end
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
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
local counter = tonumber(redis.call('GET', KEYS[4]) or '0')
local offer = tonumber(ARGV[3])
local ticket = redis.call('ZSCORE', KEYS[2], ARGV[1])
if ticket then
  ticket = tonumber(ticket)
  if offer > ticket then
    ticket = offer
    redis.call('ZADD', KEYS[2], ticket, ARGV[1])
  end
else
  ticket = math.max(offer, counter + 1)
  redis.call('ZADD', KEYS[2], ticket, ARGV[1])
end
if ticket > counter then
  redis.call('SET', KEYS[4], ticket)
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), ARGV[1])
local last = tonumber(redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')[2])
for i = 2, 4 do
  redis.call('PEXPIREAT', KEYS[i], last)
end
return {0, ticket}
"#;

/// Marks a notice that hands the lock to a waiter, as opposed to one that frees it (whose
/// payload is the released value; lock values never contain NUL). The fingerprint of the new
/// holder's value and the node's ticket counter follow, separated by a space.
pub(crate) const GRANT_MARK: u8 = 0;

/// Leaves the line, and releases the lock if it holds our value, handing it to the head of the
/// line. `KEYS` as for [`ROUND`]; `ARGV[1]` = value.
///
/// The hand-off sets the key to the head's value for what is left of the head's entry: the head
/// renewed its entry at a moment it knows, so it knows how long the key lives without asking
/// (see `waiting::fair`). The notice names the head by the SHA1 of its value, never the value
/// itself (a capability), and carries the node's ticket counter as a hint for later joiners.
/// Without a head the notice is the plain release notice. Replies as `RELEASE` does.
pub(crate) const RELEASE: &str = r#"
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
redis.call('DEL', KEYS[1])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  redis.call('ZREM', KEYS[2], gone)
  redis.call('ZREM', KEYS[3], gone)
end
local channel = 'redmutex:released:' .. KEYS[1]
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if not head then
  redis.call('PUBLISH', channel, ARGV[1])
  return 1
end
local left = tonumber(redis.call('ZSCORE', KEYS[3], head)) - now
redis.call('SET', KEYS[1], head, 'PX', left)
redis.call('ZREM', KEYS[2], head)
redis.call('ZREM', KEYS[3], head)
local counter = redis.call('GET', KEYS[4]) or '0'
redis.call('PUBLISH', channel, '\0' .. redis.sha1hex(head) .. ' ' .. counter)
return 1
"#;

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
        assert!(RELEASE.contains(&format!("'{}' .. KEYS[1]", super::super::NOTICE_PREFIX)));
    }
}
