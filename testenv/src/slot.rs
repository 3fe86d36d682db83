//! Redis Cluster's hash slots: which of the 16384 slots a key belongs to.
//!
//! The rule (the cluster specification's "Keys distribution model"): CRC16 (the XMODEM variant) of
//! the key modulo 16384, where a key with a hash tag (the first `{` followed later by a `}` with at
//! least one byte between them) is hashed by the bytes between those braces only.

/// The number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The hash slot of `key`, as `CLUSTER KEYSLOT` computes it.
///
/// # Examples
///
/// ```
/// use redmutex_testenv::{crc16, key_slot};
///
/// assert_eq!(key_slot("foo"), 12182);
/// // Keys with the same hash tag share a slot, whatever else they hold.
/// assert_eq!(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
/// assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
/// // An empty tag is no tag: the whole key is hashed.
/// assert_eq!(key_slot("{}foo"), crc16(b"{}foo") % 16384);
/// ```
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    crc16(hash_tag(key.as_ref())) % SLOTS
}

/// The part of `key` that decides its slot: the hash tag if it has one, else the whole key.
fn hash_tag(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let after = &key[open + 1..];
    match after.iter().position(|&b| b == b'}') {
        Some(close) if close > 0 => &after[..close],
        _ => key,
    }
}

/// CRC16 as Redis Cluster uses it: the XMODEM variant (polynomial 0x1021, initial value 0, no
/// reflection, no final xor).
///
/// # Examples
///
/// ```
/// // The check value of CRC-16/XMODEM.
/// assert_eq!(redmutex_testenv::crc16(b"123456789"), 0x31C3);
/// ```
pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &byte| {
        (0..8).fold(crc ^ (u16::from(byte) << 8), |crc, _| {
            if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            }
        })
    })
}

/// A key that begins with `prefix` and falls into hash slot `slot`: `prefix` then a counter, the
/// first that hashes there.
///
/// `prefix` should have no `{`, or the key may hash by a tag of it; a key with a `{tag}` of its
/// own is the other way to place keys (every key with the tag lands in the tag's slot).
///
/// # Panics
///
/// If `slot >= 16384`.
///
/// # Examples
///
/// ```
/// let key = redmutex_testenv::key_in_slot("lock:", 42);
/// assert!(key.starts_with("lock:"));
/// assert_eq!(redmutex_testenv::key_slot(&key), 42);
/// ```
pub fn key_in_slot(prefix: &str, slot: u16) -> String {
    assert!(
        slot < SLOTS,
        "testenv: slot {slot} is out of range (0..{SLOTS})"
    );
    // CRC16 is spread well enough that every slot is hit within a few hundred thousand tries
    // for any prefix; the bound only turns a bug into a clear panic.
    (0u64..10_000_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|key| key_slot(key) == slot)
        .unwrap_or_else(|| panic!("testenv: no key {prefix:?} + counter falls into slot {slot}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_xmodem_check_values() {
        assert_eq!(crc16(b""), 0);
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(crc16(b"A"), 0x58E5);
    }

    #[test]
    fn slots_of_known_keys() {
        // Answers of CLUSTER KEYSLOT on Redis 7.0.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("bar"), 5061);
        assert_eq!(key_slot("somekey"), 11058);
        assert_eq!(key_slot(""), 0);
    }

    #[test]
    fn hash_tags_follow_the_first_brace_pair_with_content() {
        assert_eq!(hash_tag(b"{user1000}.following"), b"user1000");
        assert_eq!(hash_tag(b"foo{bar}{zap}"), b"bar");
        assert_eq!(hash_tag(b"foo{{bar}}zap"), b"{bar");
        // The first `{` is followed at once by `}`: no tag, even with a later pair.
        assert_eq!(hash_tag(b"foo{}{bar}"), b"foo{}{bar}");
        assert_eq!(hash_tag(b"{}"), b"{}");
        assert_eq!(hash_tag(b"foo{bar"), b"foo{bar");
        assert_eq!(hash_tag(b"foo}bar{"), b"foo}bar{");
        assert_eq!(hash_tag(b"}{x}"), b"x");
        assert_eq!(key_slot("a{b}c"), key_slot("b"));
    }

    #[test]
    fn key_in_slot_finds_keys_for_the_first_and_last_slots() {
        for slot in [0, 1, 8191, SLOTS - 1] {
            let key = key_in_slot("k", slot);
            assert_eq!(key_slot(&key), slot, "{key}");
        }
    }
}
