//! FNV-1a, 64-bit: the one hash the simulator uses for labels and traces.
//!
//! Hand-written rather than `std::hash` because `DefaultHasher`'s output is
//! explicitly unstable across Rust releases, and a seed (or a trace hash) must
//! mean the same thing forever. **Invariant:** `Fnv1a64` over the same bytes,
//! fed in any split, yields the same value on every platform and release.

/// The FNV-1a 64-bit offset basis (the hash of the empty input).
pub const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;

/// The FNV 64-bit prime.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A running FNV-1a 64-bit hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fnv1a64 {
    state: u64,
}

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Fnv1a64 {
    /// A hash of nothing yet.
    pub const fn new() -> Self {
        Fnv1a64 {
            state: FNV_OFFSET_BASIS,
        }
    }

    /// Feeds `bytes` into the hash.
    pub fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.state ^= u64::from(byte);
            self.state = self.state.wrapping_mul(FNV_PRIME);
        }
    }

    /// Feeds `value` as 8 little-endian bytes (fixed width, so adjacent
    /// fields cannot run into each other).
    pub fn write_u64(&mut self, value: u64) {
        self.write(&value.to_le_bytes());
    }

    /// The hash of everything fed so far.
    pub const fn finish(&self) -> u64 {
        self.state
    }
}

/// The FNV-1a 64-bit hash of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = Fnv1a64::new();
    hash.write(bytes);
    hash.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn split_input_hashes_like_whole_input() {
        let mut hash = Fnv1a64::new();
        hash.write(b"foo");
        hash.write(b"bar");
        assert_eq!(hash.finish(), fnv1a64(b"foobar"));
    }
}
