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

/// The key-derivation context of [`digest_of_chunks`]: it sets those
/// digests apart from every [`digest_of`], so a chunk list and a byte string
/// never share a name.
const CHUNK_LIST_CONTEXT: &str = "actum 2026-11-27 checkpoint part chunk list";

/// The digest of a chunked checkpoint part (metadata layout 3): BLAKE3 in
/// key-derivation mode over each chunk's digest (32 bytes) and size (u64,
/// little-endian), in order. Each chunk's own digest covers its bytes, so
/// this names the whole value without reading it: an append computes it
/// from the base's chunk list and its new chunk.
pub fn digest_of_chunks(chunks: impl IntoIterator<Item = (Digest, u64)>) -> Digest {
    let mut hasher = blake3::Hasher::new_derive_key(CHUNK_LIST_CONTEXT);
    for (digest, size_bytes) in chunks {
        hasher.update(&digest.0);
        hasher.update(&size_bytes.to_le_bytes());
    }
    Digest(*hasher.finalize().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_chunk_list_digest_names_the_list_and_no_byte_string() {
        let (a, b) = (digest_of(b"ab"), digest_of(b"c"));
        let list = digest_of_chunks([(a, 2), (b, 1)]);
        assert_eq!(list, digest_of_chunks([(a, 2), (b, 1)]));
        assert_ne!(list, digest_of_chunks([(b, 1), (a, 2)]), "order counts");
        assert_ne!(list, digest_of_chunks([(a, 2), (b, 2)]), "sizes count");
        assert_ne!(list, digest_of_chunks([(a, 2)]));
        // Not the plain hash of the same input bytes: the context sets it apart.
        let mut plain = Vec::new();
        for (d, size) in [(a, 2u64), (b, 1)] {
            plain.extend_from_slice(&d.0);
            plain.extend_from_slice(&size.to_le_bytes());
        }
        assert_ne!(list, digest_of(&plain));
        assert_ne!(list, digest_of(b"abc"));
    }

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
