//! Content digests: the one place that decides how bytes are named by their
//! content, so the hash can be swapped without touching any caller.
//!
//! Invariant: `digest_of` is a pure function of its input bytes (equal bytes,
//! equal digest, on every platform and every run).
//!
//! The hash is BLAKE3 (256 bits): checkpoint payloads are stored once by
//! digest, so a collision would hand one run another run's state; that
//! needs a cryptographic hash, which is not code to write ourselves.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Length of a digest in bytes.
pub const DIGEST_LEN_BYTES: usize = 32;

/// A 32-byte content digest (BLAKE3).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Digest(pub [u8; DIGEST_LEN_BYTES]);

impl Digest {
    /// The first eight hex digits, enough to tell digests apart in a message.
    pub fn short(&self) -> String {
        hex(&self.0[..4])
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.short())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest of `bytes`: its BLAKE3 hash.
pub fn digest_of(bytes: &[u8]) -> Digest {
    let digest = Digest(*blake3::hash(bytes).as_bytes());
    assert_eq!(digest.0.len(), DIGEST_LEN_BYTES);
    digest
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn equal_bytes_equal_digest_and_padding_does_not_collide() {
        assert_eq!(digest_of(b"hello"), digest_of(b"hello"));
        assert_ne!(digest_of(b"ab"), digest_of(b"ab\0"));
        assert_ne!(digest_of(b""), digest_of(b"\0"));
        assert_ne!(digest_of(&[0u8; 8]), digest_of(&[0u8; 16]));
    }

    #[test]
    fn no_collisions_among_many_small_inputs() {
        let mut seen = BTreeSet::new();
        for a in 0u32..20_000 {
            assert!(seen.insert(digest_of(&a.to_le_bytes())), "collision at {a}");
        }
        assert_eq!(seen.len(), 20_000);
    }

    #[test]
    fn display_is_64_hex_digits() {
        let d = digest_of(b"x");
        assert_eq!(d.to_string().len(), 64);
        assert!(d.to_string().starts_with(&d.short()));
    }
}
