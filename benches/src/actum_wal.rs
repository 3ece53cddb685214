//! actum's WAL: every writer appends one-record batches; `append` returns once the record is
//! durable, sharing fsyncs through the WAL's own group commit.
//!
//! The next segment is prepared (created, zero-filled, synced) before every sample, outside the
//! timed region, standing in for the maintenance work that does this in the background; one
//! sample writes far less than a segment, so the commit path never prepares one inline. The
//! stats check after a run asserts exactly that.

use std::sync::Arc;

use actum::wal::{Wal, WalOptions, WalStats};
use actum::{DatabaseId, FsStorage};

use crate::{DurableLog, record};

/// Segment size the bench runs with.
pub const SEGMENT_SIZE_BYTES: u64 = 64 << 20;

/// A fresh WAL in its own scratch directory.
pub struct ActumWal {
    wal: Wal,
    _dir: tempfile::TempDir,
}

impl ActumWal {
    /// Creates an empty WAL with [`SEGMENT_SIZE_BYTES`] segments and prepares the next segment.
    pub fn new() -> ActumWal {
        let dir = crate::scratch_dir();
        let options = WalOptions {
            segment_size_bytes: SEGMENT_SIZE_BYTES,
            ..WalOptions::default()
        };
        let wal = Wal::create(
            Arc::new(FsStorage::new()),
            &dir.path().join("wal"),
            DatabaseId(1),
            options,
        )
        .expect("creating the actum WAL");
        let log = ActumWal { wal, _dir: dir };
        log.before_sample();
        log
    }

    /// The WAL's counters (appends, records, groups, fsyncs, inline prepares).
    pub fn stats(&self) -> WalStats {
        self.wal.stats()
    }
}

impl Default for ActumWal {
    fn default() -> Self {
        ActumWal::new()
    }
}

impl DurableLog for ActumWal {
    type Writer<'a> = ();

    fn before_sample(&self) {
        self.wal
            .prepare_next_segment()
            .expect("preparing the next WAL segment");
    }

    fn writer(&self) {}

    fn summary(&self) -> Option<String> {
        let s = self.stats();
        Some(format!(
            "{} records in {} groups, {} fsyncs ({:.1} per fsync), {} inline segment prepares",
            s.records,
            s.groups,
            s.fsyncs,
            crate::group_commit::per(s.records, s.fsyncs),
            s.inline_prepares
        ))
    }

    fn commit(&self, _: &mut (), ticket: u64) {
        let bytes = record(ticket);
        self.wal
            .append(&[bytes.as_slice()])
            .expect("actum WAL append");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::run_writers;

    #[test]
    fn every_append_is_one_record_and_groups_share_fsyncs() {
        let log = ActumWal::new();
        run_writers(&log, 8, 0, 400);
        let stats = log.stats();
        assert_eq!((stats.appends, stats.records), (400, 400));
        assert!(stats.fsyncs <= 400 && stats.groups <= 400);
        assert_eq!(stats.inline_prepares, 0);
    }
}
