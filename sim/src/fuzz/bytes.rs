//! A cursor over fuzzer bytes that never fails: past the end it reads zeros,
//! so every input, however short, maps to some well-defined choice.
//!
//! **Invariant:** reading never panics and never moves past the end.

/// Reads little-endian integers from the front of the fuzzer's bytes.
#[derive(Debug)]
pub(crate) struct Bytes<'a> {
    rest: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// A cursor at the start of `data`.
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Bytes { rest: data }
    }

    /// The next `N` bytes, zero-padded if the input ends first.
    pub(crate) fn array<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let take = N.min(self.rest.len());
        out[..take].copy_from_slice(&self.rest[..take]);
        self.rest = &self.rest[take..];
        assert!(take <= N);
        out
    }

    /// The next byte (zero past the end).
    pub(crate) fn u8(&mut self) -> u8 {
        self.array::<1>()[0]
    }

    /// The next little-endian `u16` (zero-padded).
    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.array())
    }

    /// The next little-endian `u32` (zero-padded).
    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.array())
    }

    /// The next little-endian `u64` (zero-padded).
    pub(crate) fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.array())
    }

    /// Whatever has not been read yet.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// Whether every byte has been read.
    pub(crate) fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}
