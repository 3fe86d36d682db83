//! Lock values: the proof that a key on a node belongs to one acquisition, and what a value may
//! be.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::Rng;

use crate::error::Error;

/// Bytes of randomness per value. 128 bits make a collision between two acquisitions negligible.
const VALUE_BYTES: usize = 16;

/// Characters of the encoded value: base64 without padding.
const VALUE_CHARS: usize = VALUE_BYTES.div_ceil(3) * 4 - (3 - VALUE_BYTES % 3) % 3;

/// A fresh value: 16 bytes from the thread-local CSPRNG (ChaCha, seeded from the OS), base64url.
///
/// A weak or repeated value would let two holders "share" a lock: the release script of one would
/// delete the key of the other.
pub(crate) fn random_value() -> Arc<str> {
    let mut bytes = [0u8; VALUE_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    // Encoded on the stack, then copied once into the shared string.
    let mut text = [0u8; VALUE_CHARS];
    let encoded = URL_SAFE_NO_PAD
        .encode_slice(bytes, &mut text)
        .ok()
        .and_then(|written| std::str::from_utf8(&text[..written]).ok());
    match encoded {
        Some(encoded) => Arc::from(encoded),
        // Not reached (the buffer fits the encoding, which is ASCII); correct all the same.
        None => URL_SAFE_NO_PAD.encode(bytes).into(),
    }
}

/// The fingerprint of a value, as `inspect` shows a holder's: the first 12 hex digits of its
/// SHA-1, which each node computes in the inspect script (`redis.sha1hex`). It tells holders
/// apart and links a held key to its process without giving the value away.
pub(crate) fn fingerprint(value: &str) -> String {
    let mut digest = sha1_smol::Sha1::from(value).digest().to_string();
    digest.truncate(12);
    digest
}

/// What the name's key holds while readers hold a read-write lock: a value no lock ever has
/// ([`check_value`] refuses it), so `SET NX` of a writer or a plain mutex fails, and no
/// compare-and-act script ever takes it for its own. The read-write lock's scripts spell it out
/// too; a unit test there keeps them equal.
pub(crate) const READERS_MARKER: &str = "redmutex:readers";

/// A lock value must be non-empty (an empty value would match any empty-string key), free of NUL
/// characters (a release notice whose payload starts with one is a fair hand-off, see
/// `waiting::fair`'s grant mark), must not start with `+` (a release notice whose payload does
/// kept the waiters' mark, see `waiting::KEPT_MARK`: a value that did would tell waiters that a
/// mark was kept where its release took it), and must not be the readers' marker (a holder with
/// that value would take the readers' key for its own).
pub(crate) fn check_value(value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::config("value", "must not be empty"));
    }
    if value.contains('\0') {
        return Err(Error::config("value", "must not contain NUL characters"));
    }
    if value.as_bytes().first() == Some(&crate::waiting::KEPT_MARK) {
        return Err(Error::config(
            "value",
            "must not start with `+` (it marks the release notices that kept the waiters' mark)",
        ));
    }
    if value == READERS_MARKER {
        return Err(Error::config(
            "value",
            format!("`{READERS_MARKER}` is reserved for the readers of a read-write lock"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn values_are_22_url_safe_characters() {
        let value = random_value();
        assert_eq!(value.len(), 22);
        assert!(
            value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
    }

    #[test]
    fn values_that_notices_would_misread_are_refused() {
        for value in ["", "a\0b", "+abc", READERS_MARKER] {
            assert!(check_value(value).is_err(), "{value:?}");
        }
        for value in ["a+b", "-abc", "abc+", &*random_value()] {
            assert!(check_value(value).is_ok(), "{value:?}");
        }
    }

    #[test]
    fn a_million_values_do_not_repeat() {
        let values: HashSet<Arc<str>> = (0..1_000_000).map(|_| random_value()).collect();
        assert_eq!(values.len(), 1_000_000);
    }
}
