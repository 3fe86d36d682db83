//! The Lua scripts that act on a key only while it holds our value.
//!
//! Each returns `1` when it acted on our value, `0` when the key is gone, and `-1` when it holds another
//! owner's value, so the caller can tell an expired lock from a taken one. None of them ever creates a
//! key: a lock that expired stays expired.

use std::sync::LazyLock;

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

/// SHA1 digests for EVALSHA, computed once per process rather than per call.
pub(crate) struct Digests {
    pub release: String,
    pub extend: String,
}

pub(crate) static DIGESTS: LazyLock<Digests> = LazyLock::new(|| Digests {
    release: redis::Script::new(RELEASE).get_hash().to_owned(),
    extend: redis::Script::new(EXTEND).get_hash().to_owned(),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha1_hex() {
        for digest in [&DIGESTS.release, &DIGESTS.extend] {
            assert_eq!(digest.len(), 40);
            assert!(digest.bytes().all(|b| b.is_ascii_hexdigit()));
        }
        assert_ne!(DIGESTS.release, DIGESTS.extend);
    }
}
