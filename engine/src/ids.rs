//! Identifier and position newtypes shared across the engine.
//!
//! Each is a distinct type so an LSN can never be passed where a segment
//! number is expected. All are plain integers on disk (little-endian).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A log sequence number: the position of one record in the WAL.
///
/// LSNs start at 1 and grow by exactly one per record; `Lsn::ZERO` means
/// "before the first record" (nothing written, nothing covered).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The position before any record.
    pub const ZERO: Lsn = Lsn(0);

    /// The LSN after this one.
    pub fn next(self) -> Lsn {
        Lsn(self.0.checked_add(1).expect("LSN space exhausted"))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lsn {}", self.0)
    }
}

/// The number of a WAL segment file; segment numbers start at 1 and grow by
/// one per rotation.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct SegmentId(pub u64);

impl SegmentId {
    /// The segment after this one.
    pub fn next(self) -> SegmentId {
        SegmentId(self.0.checked_add(1).expect("segment numbers exhausted"))
    }
}

impl fmt::Display for SegmentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "segment {}", self.0)
    }
}

/// The identity of one database directory, chosen when it is created and
/// stamped into every segment header and manifest copy, so bytes from
/// another database are never mistaken for ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DatabaseId(pub u128);

impl fmt::Display for DatabaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}
