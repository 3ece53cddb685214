//! The WAL's options, recovery report and metrics: plain data types.
//!
//! **Invariant:** options that pass [`WalOptions::validate`] let the largest
//! allowed record (header included) fit an empty segment.

use std::path::PathBuf;

use super::format::{GROUP_ALIGN_BYTES, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::error::{Error, Result};
use crate::ids::Lsn;

/// Default size a new segment file is created with
/// ([`WalOptions::segment_first_step_bytes`]): small, so an empty database is
/// small; a segment grows from it in doubling, synced steps.
pub const SEGMENT_FIRST_STEP_BYTES_DEFAULT: u64 = 128 << 10;

/// How the write-ahead log is configured (segment size, first step, record
/// limit, repair mode, and the test-only planted bug).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalOptions {
    /// Size of every new segment file, header included. The engine's
    /// default ([`EngineOptions::default`](crate::EngineOptions)) is 16 MiB
    /// ([`SEGMENT_SIZE_BYTES_DEFAULT`](crate::engine::SEGMENT_SIZE_BYTES_DEFAULT));
    /// a bare log's `WalOptions::default()` is 64 MiB.
    pub segment_size_bytes: u64,
    /// Size a new segment file is created with, header included (clamped
    /// to `segment_size_bytes`; default
    /// `SEGMENT_FIRST_STEP_BYTES_DEFAULT`, 128 KiB). Ahead of need the
    /// log doubles a segment's file, zero-filled and synced, up to
    /// `segment_size_bytes` (docs/DURABILITY.md, "Growing a segment").
    pub segment_first_step_bytes: u64,
    /// Largest accepted record payload; with its header it must fit an
    /// empty segment. The engine's default is 4 MiB
    /// ([`MAX_RECORD_BYTES_DEFAULT`](crate::engine::MAX_RECORD_BYTES_DEFAULT));
    /// a bare log's `WalOptions::default()` is 1 MiB.
    pub max_record_bytes: u64,
    /// Truncate damaged acknowledged data instead of refusing to open, and
    /// report what was dropped (default false).
    pub repair: bool,
    /// A known bug to plant, for the simulator's "the harness bites" runs.
    #[cfg(feature = "planted-bugs")]
    pub planted_bug: Option<crate::planted::PlantedBug>,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            segment_size_bytes: 64 << 20,
            segment_first_step_bytes: SEGMENT_FIRST_STEP_BYTES_DEFAULT,
            max_record_bytes: 1 << 20,
            repair: false,
            #[cfg(feature = "planted-bugs")]
            planted_bug: None,
        }
    }
}

impl WalOptions {
    /// Bytes available for records in one segment.
    pub fn segment_capacity_bytes(&self) -> u64 {
        self.segment_size_bytes.saturating_sub(SEGMENT_HEADER_BYTES)
    }

    /// The size a new segment file is created with: the first step, at
    /// least a header and one group boundary, at most the segment size.
    pub fn first_step_bytes(&self) -> u64 {
        self.segment_first_step_bytes
            .max(SEGMENT_HEADER_BYTES + GROUP_ALIGN_BYTES)
            .min(self.segment_size_bytes)
    }

    /// Checks that the options are consistent.
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| Err(Error::InvalidConfig { reason });
        if self.max_record_bytes > u64::from(u32::MAX) {
            return invalid(format!(
                "max_record_bytes {} exceeds the format's 4 GiB record limit",
                self.max_record_bytes
            ));
        }
        let largest = self.max_record_bytes + RECORD_HEADER_BYTES as u64;
        if largest > self.segment_capacity_bytes() {
            return invalid(format!(
                "a record of max_record_bytes {} plus its {RECORD_HEADER_BYTES}-byte header does \
                 not fit a segment of segment_size_bytes {} (whose header takes \
                 {SEGMENT_HEADER_BYTES})",
                self.max_record_bytes, self.segment_size_bytes
            ));
        }
        assert!(self.segment_size_bytes > SEGMENT_HEADER_BYTES);
        assert!(self.segment_capacity_bytes() >= RECORD_HEADER_BYTES as u64);
        Ok(())
    }
}

/// What recovery found and did when a log was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The last durable LSN after recovery (the covered LSN if the log holds
    /// no record after it).
    pub last_lsn: Lsn,
    /// Segment files examined.
    pub segments_scanned: u64,
    /// Bytes of records discarded as a torn tail (or, with repair, as
    /// damage) that recovery could read: an unfinished batch's records, a
    /// record whose header survived, and writes found after the cut. A
    /// torn write of which nothing is readable counts 0.
    pub truncated_bytes: u64,
    /// Where the log was cut: segment file and byte offset.
    pub truncated_at: Option<(PathBuf, u64)>,
    /// In repair mode: what acknowledged data was dropped (file, offset,
    /// LSN range).
    pub repair_dropped: Option<String>,
}

/// Counters since the log was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Batches appended (enqueued); each is durable once its group commits.
    pub appends: u64,
    /// Records written.
    pub records: u64,
    /// Bytes of records written (headers and payloads); each group write
    /// starts at the next 512-byte boundary, so the log spans a little
    /// more.
    pub bytes: u64,
    /// Group flushes (each one write + sync round).
    pub groups: u64,
    /// `fdatasync` calls on the commit path.
    pub fsyncs: u64,
    /// Segments created on the commit path because none was prepared.
    pub inline_prepares: u64,
    /// Segments made by renaming an old segment file and rewriting its
    /// header, instead of zero-filling a new one.
    pub recycled: u64,
    /// Grows of the segment being written made ahead of need, off the
    /// commit path (`Wal::grow_ahead`).
    pub grows: u64,
    /// Grows made on the commit path because a write found the prepared
    /// space of its segment too short (a record larger than the space
    /// left, or writes faster than the grows ahead of them).
    pub inline_grows: u64,
}
