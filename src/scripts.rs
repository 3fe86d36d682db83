//! The Lua scripts that act on a key only while it holds our value, and the acquire scripts that
//! a plain `SET NX` cannot replace.
//!
//! Each extend or release returns `1` when it acted on our value, `0` when the key is gone, and `-1`
//! when it holds another owner's value, so the caller can tell an expired lock from a taken one. None
//! of them ever creates a key: a lock that expired stays expired. Acquire scripts return a number
//! of 0 or more when they took the lock, and `-1` when it is held (see `node::Request::interpret`).

use std::sync::LazyLock;

pub(crate) mod fair;

/// Compare-and-delete: `KEYS[1]` = name, `ARGV[1]` = value.
pub(crate) const RELEASE: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return -1
"#;

/// The pub/sub channel of a name's release notices is this prefix followed by the name. The
/// script below spells it out too; a unit test keeps the two equal.
pub(crate) const NOTICE_PREFIX: &str = "redmutex:released:";

/// Compare-and-delete that also publishes a release notice when it deletes, for mutexes with
/// wake-up on release: `KEYS[1]` = name, `ARGV[1]` = value. Publishing in the same script costs no
/// extra round trip, and a notice is sent exactly when the key went away. The message is the
/// released value, which tells one release from the next (see `hub`); it reveals nothing new, as
/// any client of the node could read it with GET while the lock was held.
pub(crate) const RELEASE_NOTIFY: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], ARGV[1])
  return 1
end
return -1
"#;

/// Compare-and-PEXPIRE: `KEYS[1]` = name, `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds.
pub(crate) const EXTEND: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return -1
"#;

/// Fenced acquire: `SET name value NX PX expiry`, and on success the name's fencing counter.
/// `KEYS[1]` = name, `KEYS[2]` = counter, `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds.
/// Returns the counter (0 if never set), or `-1` if the name is held. Setting and reading are one
/// atomic step: the counter read is the one in force when the lock was free.
pub(crate) const ACQUIRE_FENCED: &str = r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return tonumber(redis.call('GET', KEYS[2]) or '0')
end
return -1
"#;

/// Raise the fencing counter to the chosen token, only where our value still holds the lock:
/// `KEYS[1]` = name, `KEYS[2]` = counter, `ARGV[1]` = value, `ARGV[2]` = token. The counter never
/// goes down and never expires.
pub(crate) const RAISE: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
if current ~= ARGV[1] then return -1 end
local counter = tonumber(redis.call('GET', KEYS[2]) or '0')
if counter < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
"#;

/// Inspection (`Mutex::inspect`): `KEYS[1]` = name. Returns nil when the key is absent, else a short
/// fingerprint of the value (the first 12 hex digits of its SHA1) and the key's PTTL, read in one
/// atomic step. The value itself never leaves the node: it is a capability.
pub(crate) const INSPECT: &str = r#"
local current = redis.call('GET', KEYS[1])
if not current then return false end
return {string.sub(redis.sha1hex(current), 1, 12), redis.call('PTTL', KEYS[1])}
"#;

/// Forced release (`Mutex::force_unlock`): deletes the key whatever it holds. `KEYS[1]` = name,
/// `ARGV[1]` = `1` to publish a release notice as `RELEASE_NOTIFY` does (with the released value,
/// so waiters tell this release from others). Returns 1 when a key was deleted, 0 when there was
/// none. The fencing counter (`<name>:fence`) is another key and stays.
pub(crate) const FORCE_RELEASE: &str = r#"
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return 0 end
local current = ''
if kind == 'string' then current = redis.call('GET', KEYS[1]) end
redis.call('DEL', KEYS[1])
if ARGV[1] == '1' then
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], current)
end
return 1
"#;

/// The start of every semaphore script. `KEYS[1]` = the name: a sorted set of the holders'
/// values, each scored by when it expires (milliseconds on this node's clock), and one more
/// member, the empty string (never a lock value), scored by minus the permit count the holders
/// agreed on. One key holds both, so the count lives and goes exactly as long as the holders do.
/// Defines `refused(reply)`, which turns the error of the first command on the name into one that
/// says what the name holds instead (a `Mutex`'s lock is a string), and `clock()`.
///
/// Time is the node's own (`TIME`): an entry expires on the clock of the node that holds it, as a
/// key with a TTL does. Redis 7 replicates a script's effects, so `TIME` is allowed in one.
///
/// The key expires no earlier than its latest holder: its expiry is set with the first holder
/// and only ever moved outwards (`PEXPIREAT ... GT`, Redis 7.0). Were the name to expire first,
/// the node would forget live holders. The last holder to give its permit back deletes it, so a
/// semaphore nobody holds leaves nothing behind; one whose holders expired is gone by the latest
/// expiry. Scripts run on every acquire and release, so each sends as few commands as it can:
/// expired holders are swept only when they could matter (a full node, or another count).
macro_rules! semaphore_prelude {
    () => {
        r#"
local function refused(reply)
  if type(reply) ~= 'table' or not reply['err'] then return nil end
  local kind = redis.call('TYPE', KEYS[1])['ok']
  if kind == 'zset' then return reply end
  return redis.error_reply('REDMUTEX semaphore "' .. KEYS[1] .. '": the key holds a ' .. kind ..
    ', not the holders of a semaphore (does a Mutex use this name?)')
end
local function clock()
  local time = redis.call('TIME')
  return time[1] * 1000 + math.floor(time[2] / 1000)
end
"#
    };
}

/// Takes a permit: `ARGV[1]` = value, `ARGV[2]` = expiry in milliseconds, `ARGV[3]` = permits.
/// Admits the value only if fewer than `permits` live holders remain (expired ones are swept
/// first). Returns 0 when admitted (the value already there is admitted again, its expiry
/// renewed), -1 when the node is full, and an error naming both counts when live holders were
/// admitted under another permit count: two counts on one node would admit different numbers.
pub(crate) const SEMAPHORE_ACQUIRE: &str = concat!(
    semaphore_prelude!(),
    r#"
local members = redis.pcall('ZCARD', KEYS[1])
local refusal = refused(members)
if refusal then return refusal end
local now = clock()
local expires = now + ARGV[2]
local permits = tonumber(ARGV[3])
if members == 0 then
  redis.call('ZADD', KEYS[1], -permits, '', expires, ARGV[1])
  redis.call('PEXPIREAT', KEYS[1], expires)
  return 0
end
local agreed = redis.call('ZSCORE', KEYS[1], '')
local held = members
if agreed then
  agreed = -tonumber(agreed)
  held = members - 1
end
local other = agreed and agreed ~= permits
if other or held >= permits then
  held = held - redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, now)
end
if other and held > 0 then
  return redis.error_reply('REDMUTEX semaphore "' .. KEYS[1] .. '" is held with ' .. agreed ..
    ' permits on this node, asked with ' .. permits ..
    ' (all holders must agree; the count can change once nobody holds it)')
end
if held >= permits and not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return -1
end
if agreed == permits then
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
else
  redis.call('ZADD', KEYS[1], -permits, '', expires, ARGV[1])
end
if held == 0 and not agreed then
  -- The sweep emptied a set without its count member (not one these scripts made): it is new.
  redis.call('PEXPIREAT', KEYS[1], expires)
else
  redis.call('PEXPIREAT', KEYS[1], expires, 'GT')
end
return 0
"#
);

/// Renews our permit's expiry, only while it is live: `ARGV[1]` = value, `ARGV[2]` = expiry in
/// milliseconds. Returns 1, or 0 when the value holds no live permit here (never re-creates one).
pub(crate) const SEMAPHORE_EXTEND: &str = concat!(
    semaphore_prelude!(),
    r#"
local expires = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
local refusal = refused(expires)
if refusal then return refusal end
if not expires then return 0 end
local now = clock()
if tonumber(expires) <= now then return 0 end
local renewed = now + ARGV[2]
redis.call('ZADD', KEYS[1], 'XX', renewed, ARGV[1])
redis.call('PEXPIREAT', KEYS[1], renewed, 'GT')
return 1
"#
);

/// Gives our permit back: `ARGV[1]` = value, `ARGV[2]` = `1` to publish a release notice (as
/// [`RELEASE_NOTIFY`] does, on the same channel). Returns 1, or 0 when the value held no live
/// permit here (an entry past its expiry is removed, but was no longer ours to give back). The
/// last holder deletes the name, permit count and all.
pub(crate) const SEMAPHORE_RELEASE: &str = concat!(
    semaphore_prelude!(),
    r#"
local expires = redis.pcall('ZSCORE', KEYS[1], ARGV[1])
local refusal = refused(expires)
if refusal then return refusal end
if not expires then return 0 end
if redis.call('ZCOUNT', KEYS[1], 0, '+inf') == 1 then
  redis.call('DEL', KEYS[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
if tonumber(expires) <= clock() then return 0 end
if ARGV[2] == '1' then
  redis.call('PUBLISH', 'redmutex:released:' .. KEYS[1], ARGV[1])
end
return 1
"#
);

/// Every script, loaded into a node's cache on each new connection, so that requests sent by
/// digest find them even when nobody is left to send the fallback (see `node::Delivery`), and
/// known by digest when a node names one in an error.
pub(crate) const ALL: &[&str] = &[
    RELEASE,
    RELEASE_NOTIFY,
    EXTEND,
    ACQUIRE_FENCED,
    RAISE,
    INSPECT,
    FORCE_RELEASE,
    fair::ROUND,
    fair::RELEASE,
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_EXTEND,
    SEMAPHORE_RELEASE,
];

/// SHA1 digests for EVALSHA, computed once per process rather than per call.
pub(crate) struct Digests {
    pub release: String,
    pub release_notify: String,
    pub extend: String,
    pub acquire_fenced: String,
    pub raise: String,
    pub inspect: String,
    pub force_release: String,
    pub semaphore_acquire: String,
    pub semaphore_extend: String,
    pub semaphore_release: String,
}

pub(crate) static DIGESTS: LazyLock<Digests> = LazyLock::new(|| Digests {
    release: redis::Script::new(RELEASE).get_hash().to_owned(),
    release_notify: redis::Script::new(RELEASE_NOTIFY).get_hash().to_owned(),
    extend: redis::Script::new(EXTEND).get_hash().to_owned(),
    acquire_fenced: redis::Script::new(ACQUIRE_FENCED).get_hash().to_owned(),
    raise: redis::Script::new(RAISE).get_hash().to_owned(),
    inspect: redis::Script::new(INSPECT).get_hash().to_owned(),
    force_release: redis::Script::new(FORCE_RELEASE).get_hash().to_owned(),
    semaphore_acquire: redis::Script::new(SEMAPHORE_ACQUIRE).get_hash().to_owned(),
    semaphore_extend: redis::Script::new(SEMAPHORE_EXTEND).get_hash().to_owned(),
    semaphore_release: redis::Script::new(SEMAPHORE_RELEASE).get_hash().to_owned(),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha1_hex() {
        for digest in [
            &DIGESTS.release,
            &DIGESTS.release_notify,
            &DIGESTS.extend,
            &DIGESTS.acquire_fenced,
            &DIGESTS.raise,
            &DIGESTS.inspect,
            &DIGESTS.force_release,
            &DIGESTS.semaphore_acquire,
            &DIGESTS.semaphore_extend,
            &DIGESTS.semaphore_release,
        ] {
            assert_eq!(digest.len(), 40);
            assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(DIGESTS.release, DIGESTS.extend);
    }

    #[test]
    fn notices_go_to_the_channel_listeners_subscribe_to() {
        for script in [RELEASE_NOTIFY, FORCE_RELEASE, SEMAPHORE_RELEASE] {
            assert!(script.contains(&format!("'{NOTICE_PREFIX}' .. KEYS[1]")));
        }
    }
}
