//! Redis Cluster hash tags: which part of a key decides its slot, and how redmutex names the keys
//! and channels beside a lock key so that they land in the lock key's slot.
//!
//! Redis hashes the whole key, or, where the key has a hash tag, only the tag: the text between
//! the first `{` and the first `}` after it, when that text is not empty. A script's keys must
//! all be in one slot on a cluster, and a script may publish a sharded notice only on a channel
//! of that slot, so everything redmutex keeps beside a name carries the name's slot.

/// The key's hash tag, if it has one: the text between its first `{` and the first `}` after it,
/// when not empty.
pub(crate) fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let inside = &key[open + 1..];
    let close = inside.find('}')?;
    (close > 0).then(|| &inside[..close])
}

/// What goes in front of the suffix of a name's auxiliary keys (`<prefix>:fence`, ...) and of the
/// name's sharded notice channel: the name in braces (`{order:42}`) for a name without a hash
/// tag, so that the whole name is the tag; for a name with one, the name and one more colon
/// (`{user:1}:cart:`), which keeps its tag.
///
/// The colon keeps two names apart: without it the name `x` (keys `{x}:fence`, ...) and the name
/// `{x}` would share their auxiliary keys. A prefix of the first kind ends in `}`, one of the
/// second kind in `:`, and each gives its name back, so no two names share a prefix.
///
/// `None` for a name without a hash tag that contains `}`: in braces, its own `}` would end the
/// tag early and put the keys in another slot.
pub(crate) fn slot_prefix(name: &str) -> Option<String> {
    if hash_tag(name).is_some() {
        Some(format!("{name}:"))
    } else if name.contains('}') {
        None
    } else {
        Some(format!("{{{name}}}"))
    }
}

/// The slot of `key` in a Redis Cluster: CRC16 (XMODEM) of its hash tag, or of the whole key
/// without one, modulo 16384, as `CLUSTER KEYSLOT` answers: for the checks of multi-name locks
/// (the engine), and for the scratch key the operator's checks put on each master.
pub(crate) fn key_slot(key: &str) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    let mut crc: u16 = 0;
    for byte in hashed.bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_redis_computes() {
        // CRC16/XMODEM's check value, and slots from Redis's cluster specification.
        assert_eq!(key_slot("123456789"), 0x31C3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(
            key_slot("{user1000}.following"),
            key_slot("{user1000}.followers")
        );
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        for key in ["order:42", "{user:1}:cart", "a{}b", "é"] {
            assert_eq!(key_slot(key), redmutex_testenv::key_slot(key), "{key}");
        }
    }

    #[test]
    fn the_tag_is_the_first_non_empty_braces() {
        assert_eq!(hash_tag("order:42"), None);
        assert_eq!(hash_tag("{user:1}:cart"), Some("user:1"));
        assert_eq!(hash_tag("a{b}c{d}"), Some("b"));
        // An empty tag is no tag: Redis hashes the whole key.
        assert_eq!(hash_tag("a{}b{c}"), None);
        assert_eq!(hash_tag("a{b"), None);
        assert_eq!(hash_tag("a}b{c}"), Some("c"));
        assert_eq!(hash_tag("{{x}}"), Some("{x"));
    }

    /// The part of `key` Redis hashes.
    fn hashed(key: &str) -> &str {
        hash_tag(key).unwrap_or(key)
    }

    #[test]
    fn keys_beside_a_name_hash_as_the_name_does() {
        for name in ["order:42", "{user:1}:cart", "x{y", "{x}", "{{x}}", "é{ü}"] {
            let prefix = slot_prefix(name).expect("a prefix");
            for suffix in [":fence", ":readers", ":line"] {
                assert_eq!(hashed(&format!("{prefix}{suffix}")), hashed(name), "{name}");
            }
        }
    }

    #[test]
    fn no_two_names_share_a_prefix() {
        let names = [
            "x", "{x}", "{x}:", "x:", "{x}x", "{{x}}", "{x", "x{", "{}x", "a{x}", "{a}{x}",
        ];
        let mut seen = std::collections::HashMap::new();
        for name in names {
            if let Some(prefix) = slot_prefix(name) {
                assert_eq!(seen.insert(prefix.clone(), name), None, "{prefix}");
            }
        }
    }

    #[test]
    fn a_name_whose_braces_cannot_wrap_it_has_no_prefix() {
        assert_eq!(slot_prefix("a}b"), None);
        assert_eq!(slot_prefix("a{}b}"), None);
        // With a tag of its own, its `}` does not matter.
        assert_eq!(slot_prefix("{a}b}").as_deref(), Some("{a}b}:"));
    }
}
