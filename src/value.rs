//! Lock values: the proof that a key on a node belongs to one acquisition.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::Rng;

/// Bytes of randomness per value. 128 bits make a collision between two acquisitions negligible.
const VALUE_BYTES: usize = 16;

/// A fresh value: 16 bytes from the thread-local CSPRNG (ChaCha, seeded from the OS), base64url.
///
/// A weak or repeated value would let two holders "share" a lock: the release script of one would
/// delete the key of the other.
pub(crate) fn random_value() -> String {
    let mut bytes = [0u8; VALUE_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
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
    fn a_million_values_do_not_repeat() {
        let values: HashSet<String> = (0..1_000_000).map(|_| random_value()).collect();
        assert_eq!(values.len(), 1_000_000);
    }
}
