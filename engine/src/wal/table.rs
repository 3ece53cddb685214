//! The live-segment table and the context shared by the writer, the
//! readers, segment preparation and garbage collection.
//!
//! **Invariant:** `live` is non-empty, numbered contiguously, and each
//! entry's `first_lsn` is the exact LSN of its first record (or, for the
//! active segment before its first record, the next LSN to be written), so
//! segment `i` holds exactly `live[i].first_lsn .. live[i + 1].first_lsn`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::WalOptions;
use super::segment::{self, SegmentFile};
use crate::error::Result;
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::storage::Storage;

/// One live segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveSegment {
    /// Its number.
    pub id: SegmentId,
    /// The LSN of its first record.
    pub first_lsn: Lsn,
}

/// The most old segment files kept for reuse; more are deleted.
pub const SPARES_MAX: usize = 2;

/// Which segments exist, plus the one prepared ahead of need and old files
/// kept for reuse.
#[derive(Debug)]
pub struct SegmentTable {
    /// Live segments, oldest first; the last one is being written.
    pub live: Vec<LiveSegment>,
    /// The next segment, already created and synced, if prepared.
    pub prepared: Option<SegmentFile>,
    /// Paths of old segment files no longer needed, of the configured
    /// size, to be renamed into the next segments (at most `SPARES_MAX`).
    pub spares: Vec<PathBuf>,
}

/// Counters exposed through [`super::Wal::stats`].
#[derive(Debug, Default)]
pub struct Counters {
    /// Append calls that wrote at least one record.
    pub appends: AtomicU64,
    /// Records written.
    pub records: AtomicU64,
    /// Bytes of records written (headers and payloads).
    pub bytes: AtomicU64,
    /// Group flushes (one write + sync round each).
    pub groups: AtomicU64,
    /// `fdatasync` calls on segment files by the commit path.
    pub fsyncs: AtomicU64,
    /// Segments created inline on the commit path (not prepared ahead).
    pub inline_prepares: AtomicU64,
    /// Segments made from an old segment file rather than zero-filled.
    pub recycled: AtomicU64,
}

impl Counters {
    /// Adds one to `counter`.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Everything shared by the writer, readers, preparation and GC.
#[derive(Debug)]
pub struct Context {
    /// The storage seam.
    pub storage: Arc<dyn Storage>,
    /// The WAL directory.
    pub dir: PathBuf,
    /// This database.
    pub database: DatabaseId,
    /// Options the log was opened with.
    pub options: WalOptions,
    /// The segment table.
    pub table: Mutex<SegmentTable>,
    /// Held while a segment is being prepared or installed, so a
    /// maintenance preparation and an inline one never race on a name.
    pub prepare_lock: Mutex<()>,
    /// Metrics.
    pub counters: Counters,
}

impl Context {
    /// Locks the segment table.
    pub fn table(&self) -> MutexGuard<'_, SegmentTable> {
        self.table.lock().expect("wal segment table lock")
    }

    /// Makes segment `id` (starting at `first_lsn`) the newest live
    /// segment: takes the prepared one or makes it now.
    pub fn install_next(&self, id: SegmentId, first_lsn: Lsn) -> Result<SegmentFile> {
        let _preparing = self.prepare_lock.lock().expect("wal prepare lock");
        let prepared = self.table().prepared.take();
        let file = match prepared {
            Some(file) => file,
            None => {
                Counters::bump(&self.counters.inline_prepares);
                self.make(id, first_lsn)?
            }
        };
        assert_eq!(file.id, id, "the prepared segment follows the active one");
        let mut table = self.table();
        let newest = table.live.last().expect("live segments are never empty");
        assert_eq!(newest.id.next(), id);
        assert!(newest.first_lsn <= first_lsn);
        table.live.push(LiveSegment { id, first_lsn });
        Ok(file)
    }

    /// Prepares the segment after the newest live one, if not done yet.
    /// `lsn_floor` is a lower bound on any LSN it will hold.
    pub fn prepare_ahead(&self, lsn_floor: Lsn) -> Result<()> {
        let _preparing = self.prepare_lock.lock().expect("wal prepare lock");
        let id = {
            let table = self.table();
            if table.prepared.is_some() {
                return Ok(());
            }
            table
                .live
                .last()
                .expect("live segments are never empty")
                .id
                .next()
        };
        let file = self.make(id, lsn_floor)?;
        let mut table = self.table();
        assert!(table.prepared.is_none(), "only one preparation at a time");
        assert_eq!(table.live.last().map(|s| s.id.next()), Some(id));
        table.prepared = Some(file);
        Ok(())
    }

    /// Makes segment `id` from a spare old file if there is one, else a new
    /// zero-filled file. The caller holds `prepare_lock`.
    fn make(&self, id: SegmentId, first_lsn: Lsn) -> Result<SegmentFile> {
        // Bounded by SPARES_MAX: each turn takes one spare.
        loop {
            let Some(old) = self.table().spares.pop() else {
                break;
            };
            let recycled = segment::recycle(
                &self.storage,
                &self.dir,
                &old,
                self.database,
                id,
                first_lsn,
                &self.options,
            )?;
            if let Some(file) = recycled {
                Counters::bump(&self.counters.recycled);
                return Ok(file);
            }
        }
        segment::prepare(
            &self.storage,
            &self.dir,
            self.database,
            id,
            first_lsn,
            &self.options,
        )
    }

    /// Keeps the old segment file at `path` for reuse if fewer than
    /// `SPARES_MAX` are kept; `false` if the caller must remove it.
    pub fn keep_spare(&self, path: PathBuf) -> bool {
        let mut table = self.table();
        if table.spares.len() < SPARES_MAX {
            table.spares.push(path);
            true
        } else {
            false
        }
    }
}
