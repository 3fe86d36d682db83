//! The Lua scripts that act on a key only while it holds our value.
//!
//! Each returns `1` when it acted on our value, `0` when the key is gone, and `-1` when it holds another
//! owner's value, so the caller can tell an expired lock from a taken one. None of them ever creates a
//! key: a lock that expired stays expired.

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
}

pub(crate) static DIGESTS: LazyLock<Digests> = LazyLock::new(|| Digests {
    release: redis::Script::new(RELEASE).get_hash().to_owned(),
    release_notify: redis::Script::new(RELEASE_NOTIFY).get_hash().to_owned(),
    extend: redis::Script::new(EXTEND).get_hash().to_owned(),
    acquire_fenced: redis::Script::new(ACQUIRE_FENCED).get_hash().to_owned(),
    raise: redis::Script::new(RAISE).get_hash().to_owned(),
    inspect: redis::Script::new(INSPECT).get_hash().to_owned(),
    force_release: redis::Script::new(FORCE_RELEASE).get_hash().to_owned(),
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
        ] {
            assert_eq!(digest.len(), 40);
            assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(DIGESTS.release, DIGESTS.extend);
    }

    #[test]
    fn notices_go_to_the_channel_listeners_subscribe_to() {
        assert!(RELEASE_NOTIFY.contains(&format!("'{NOTICE_PREFIX}' .. KEYS[1]")));
        assert!(FORCE_RELEASE.contains(&format!("'{NOTICE_PREFIX}' .. KEYS[1]")));
    }
}
