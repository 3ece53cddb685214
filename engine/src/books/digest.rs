//! Content digests: the one place that decides how bytes are named by their
//! content, so the hash can be swapped without touching any caller.
//!
//! Invariant: `digest_of` is a pure function of its input bytes (equal bytes,
//! equal digest, on every platform and every run).
//!
//! **Not cryptographic.** The current implementation is a placeholder: four
//! independently seeded 64-bit lanes of a splitmix64-style mixer over the
//! input words, finished with the length. It is collision-resistant enough
//! for tests and honest inputs, but an adversary can construct collisions.
//! It is to be replaced by a real 256-bit hash (blake3 recommended) once the
//! dependency is added; the `Digest` type and `digest_of` signature stay.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Length of a digest in bytes.
pub const DIGEST_LEN_BYTES: usize = 32;

/// A 32-byte content digest (see the module docs: currently a
/// non-cryptographic placeholder).
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

/// The digest of `bytes`. Swap the body to change the hash.
pub fn digest_of(bytes: &[u8]) -> Digest {
    placeholder_mix256_not_cryptographic(bytes)
}

/// Seeds of the four lanes (digits of pi); distinct so the lanes differ.
const LANE_SEEDS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
];

/// The splitmix64 finaliser: a bijection on u64 with good avalanche.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn placeholder_mix256_not_cryptographic(bytes: &[u8]) -> Digest {
    let mut lanes = LANE_SEEDS;
    let mut absorb = |word: u64| {
        for (lane, (seed, rotation)) in lanes.iter_mut().zip(LANE_SEEDS.iter().zip([7, 19, 31, 43]))
        {
            *lane = mix64(*lane ^ word ^ seed).rotate_left(rotation);
        }
    };
    let chunks = bytes.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        absorb(u64::from_le_bytes(word));
    }
    // The tail is padded with zeros; the length absorbed last tells
    // "ab" from "ab\0", so padding cannot collide.
    let mut word = [0u8; 8];
    word[..tail.len()].copy_from_slice(tail);
    absorb(u64::from_le_bytes(word));
    absorb(bytes.len() as u64);
    // Cross-mix the lanes so every output byte depends on every lane.
    let mut out = [0u8; DIGEST_LEN_BYTES];
    for i in 0..4 {
        let folded = mix64(lanes[i] ^ lanes[(i + 1) % 4].rotate_left(17) ^ lanes[(i + 2) % 4]);
        out[i * 8..(i + 1) * 8].copy_from_slice(&folded.to_le_bytes());
    }
    Digest(out)
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
