//! The live-segment table and the context shared by the writer, the
//! readers, segment preparation and garbage collection.
//!
//! **Invariant:** `live` is non-empty, numbered contiguously, and each
//! entry's `first_lsn` is the exact LSN of its first record (or, for the
//! active segment before its first record, the next LSN to be written), so
//! segment `i` holds exactly `live[i].first_lsn .. live[i + 1].first_lsn`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use super::WalOptions;
use super::format::SEGMENT_HEADER_BYTES;
use super::segment::{self, SegmentFile};
use crate::error::{Error, Result};
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::planted::{PlantedBug, planted};
use crate::storage::{OpenMode, Storage, StorageFile};

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
    /// The next segment, already created and synced, if prepared, with the
    /// space its grows will share with the writer.
    pub prepared: Option<(SegmentFile, Arc<ActiveSpace>)>,
    /// Paths of old segment files no longer needed, at whatever length
    /// they grew to, to be renamed into the next segments (at most
    /// `SPARES_MAX`; one longer than the configured size is removed then).
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
    /// Grows of the active segment made ahead of need.
    pub grows: AtomicU64,
    /// Grows made on the commit path, the prepared space being too short.
    pub inline_grows: AtomicU64,
}

/// The usable space of a segment the writer appends to (or will), shared
/// by the writer and the grows.
///
/// **Invariant:** `capacity` is a durable, zero-filled (or written) length
/// of the file; the writer writes only below it, and a grow writes only at
/// or past it and raises it only after its zeros and the new length are
/// synced. So a grow never touches a byte the writer wrote, and a crash in
/// the middle of one loses nothing the log acknowledged.
#[derive(Debug)]
pub struct ActiveSpace {
    /// The segment's number.
    pub id: SegmentId,
    /// Its path.
    pub path: PathBuf,
    /// A handle of the grows' own on the file. On Linux a writeback error
    /// is reported to every open file description, so an error a grow's
    /// sync meets on pages the writer wrote is still reported to the
    /// writer's next `fdatasync` (which then poisons the log). `None` for
    /// a segment already at its limit, which never grows: such a log
    /// makes exactly the I/O calls it made before segments grew.
    file: Option<Box<dyn StorageFile>>,
    /// Bytes of the file the writer may use (see the invariant).
    capacity: AtomicU64,
    /// The most the writer ever uses of this segment: the segment size, or
    /// the length of a longer file made under other options.
    pub limit: u64,
    /// The file's length when it was made or opened.
    opened_bytes: u64,
}

impl ActiveSpace {
    /// The space of `segment`, through a handle of its own on the file if
    /// it may grow.
    pub fn open(
        storage: &Arc<dyn Storage>,
        segment: &SegmentFile,
        options: &WalOptions,
    ) -> Result<Arc<ActiveSpace>> {
        let limit = segment.size_bytes.max(options.segment_size_bytes);
        let file = if segment.size_bytes < limit {
            let file = storage
                .open(&segment.path, OpenMode::Existing)
                .map_err(|e| Error::io("open segment to grow it", &segment.path, e))?;
            Some(file)
        } else {
            None
        };
        Ok(Arc::new(ActiveSpace {
            id: segment.id,
            path: segment.path.clone(),
            file,
            capacity: AtomicU64::new(segment.size_bytes),
            limit,
            opened_bytes: segment.size_bytes,
        }))
    }

    /// Bytes of the file the writer may use now.
    pub fn capacity(&self) -> u64 {
        self.capacity.load(Ordering::Acquire)
    }

    /// Whether a grow ahead is due once the writer's writes reach
    /// `written`: less than half of the space is left, and the segment
    /// has not reached its size.
    pub fn wants_growth(&self, written: u64) -> bool {
        let capacity = self.capacity();
        capacity < self.limit && written > capacity / 2
    }
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
    /// Held while a segment is being prepared, installed or grown, so a
    /// maintenance preparation and an inline one never race on a name, and
    /// two grows never race on a file.
    pub prepare_lock: Mutex<()>,
    /// The space of the segment being written.
    pub active: Mutex<Arc<ActiveSpace>>,
    /// Set by the writer when its last write left less than half of the
    /// active segment's space: a grow ahead is due.
    pub grow_wanted: AtomicBool,
    /// Metrics.
    pub counters: Counters,
}

impl Context {
    /// Locks the segment table.
    pub fn table(&self) -> MutexGuard<'_, SegmentTable> {
        self.table.lock().expect("wal segment table lock")
    }

    /// Makes every live segment, the prepared one and the WAL directory
    /// durable: the syncs recovery left to the first write of an open
    /// whose log ended at its clean shutdown (`Recovered::syncs_deferred`).
    /// `active` is the writer's segment, synced through its own handle.
    pub fn sync_log_for_first_write(&self, active: &SegmentFile) -> Result<()> {
        let (older, prepared) = {
            let table = self.table();
            let older: Vec<SegmentId> = table
                .live
                .iter()
                .map(|s| s.id)
                .filter(|&id| id != active.id)
                .collect();
            (older, table.prepared.as_ref().map(|(file, _)| file.path.clone()))
        };
        let paths = older
            .into_iter()
            .map(|id| super::format::segment_path(&self.dir, id))
            .chain(prepared);
        for path in paths {
            self.storage
                .open(&path, OpenMode::Existing)
                .and_then(|file| file.sync_data())
                .map_err(|e| Error::io("sync segment before the first write", &path, e))?;
        }
        active
            .file
            .sync_data()
            .map_err(|e| Error::io("sync segment before the first write", &active.path, e))?;
        self.storage
            .sync_dir(&self.dir)
            .map_err(|e| Error::io("sync wal directory", &self.dir, e))
    }

    /// The space of the segment being written.
    pub fn active_space(&self) -> Arc<ActiveSpace> {
        Arc::clone(&self.active.lock().expect("wal active space lock"))
    }

    /// Makes segment `id` (starting at `first_lsn`) the newest live
    /// segment and the one being written: takes the prepared one or makes
    /// it now.
    pub fn install_next(
        &self,
        id: SegmentId,
        first_lsn: Lsn,
    ) -> Result<(SegmentFile, Arc<ActiveSpace>)> {
        let _preparing = self.prepare_lock.lock().expect("wal prepare lock");
        let prepared = self.table().prepared.take();
        let (file, space) = match prepared {
            Some(prepared) => prepared,
            None => {
                Counters::bump(&self.counters.inline_prepares);
                let file = self.make(id, first_lsn)?;
                let space = ActiveSpace::open(&self.storage, &file, &self.options)?;
                (file, space)
            }
        };
        *self.active.lock().expect("wal active space lock") = Arc::clone(&space);
        self.grow_wanted.store(false, Ordering::Relaxed);
        assert_eq!(file.id, id, "the prepared segment follows the active one");
        let mut table = self.table();
        let newest = table.live.last().expect("live segments are never empty");
        assert_eq!(newest.id.next(), id);
        assert!(newest.first_lsn <= first_lsn);
        table.live.push(LiveSegment { id, first_lsn });
        Ok((file, space))
    }

    /// Grows the segment being written one step (doubling, up to its
    /// limit) if its writer asked for it; a no-op if another preparation
    /// or grow is under way (it will be asked again). Off the commit
    /// path: the writer goes on writing below the old capacity meanwhile.
    pub fn grow_ahead(&self) -> Result<bool> {
        let _preparing = match self.prepare_lock.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::WouldBlock) => return Ok(false),
            Err(TryLockError::Poisoned(e)) => panic!("wal prepare lock: {e}"),
        };
        if !self.grow_wanted.swap(false, Ordering::Relaxed) {
            return Ok(false);
        }
        let space = self.active_space();
        let capacity = space.capacity();
        if capacity >= space.limit {
            return Ok(false);
        }
        let target = capacity.saturating_mul(2).min(space.limit);
        self.grow_locked(&space, target)?;
        Counters::bump(&self.counters.grows);
        Ok(true)
    }

    /// Grows `space` so the writer may write up to `needed`: the writer
    /// found its prepared space too short, on the commit path. Doubles
    /// until `needed` fits (the caller checked it fits the limit).
    pub fn grow_inline(&self, space: &ActiveSpace, needed: u64) -> Result<()> {
        assert!(needed <= space.limit, "a write never passes its segment");
        let _preparing = self.prepare_lock.lock().expect("wal prepare lock");
        let capacity = space.capacity();
        if capacity >= needed {
            return Ok(()); // A grow ahead finished while we waited.
        }
        let mut target = capacity.max(SEGMENT_HEADER_BYTES);
        // Bounded by log2(limit / capacity) doublings.
        while target < needed {
            target = target.saturating_mul(2);
        }
        self.grow_locked(space, target.min(space.limit))?;
        Counters::bump(&self.counters.inline_grows);
        Ok(())
    }

    /// Zero-fills `space` from its capacity to `target`, syncs, and only
    /// then lets the writer use it. The caller holds `prepare_lock`.
    fn grow_locked(&self, space: &ActiveSpace, target: u64) -> Result<()> {
        let capacity = space.capacity();
        assert!(target > capacity && target <= space.limit);
        // Planted: fill from the length the segment had when it was made
        // or opened, as if it had never grown since, so a second grow
        // zeroes what the writer wrote after the first.
        let from = if planted(&self.options, PlantedBug::GrowFromStaleSize) {
            space.opened_bytes
        } else {
            capacity
        };
        let file = space
            .file
            .as_deref()
            .expect("a segment below its limit has a handle to grow it");
        segment::grow(file, &space.path, from, target)?;
        space.capacity.store(target, Ordering::Release);
        Ok(())
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
        let space = ActiveSpace::open(&self.storage, &file, &self.options)?;
        let mut table = self.table();
        assert!(table.prepared.is_none(), "only one preparation at a time");
        assert_eq!(table.live.last().map(|s| s.id.next()), Some(id));
        table.prepared = Some((file, space));
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

    /// Shrinks the log's files for a clean close: removes the spares, cuts
    /// the prepared segment back to its first step, and replaces the
    /// active segment, if it grew past its first step, by a new empty one
    /// of that step under its name, whose header promises `covered + 1`
    /// (docs/DURABILITY.md, "Shrinking the log at close"). The caller
    /// holds `prepare_lock` and has stopped the log at `covered`, its
    /// durable LSN, which a durable checkpoint recorded in the manifest
    /// covers. `false`, with nothing changed, unless the active segment is
    /// the only live one (the manifest's oldest).
    pub fn shrink_locked(&self, covered: Lsn) -> Result<bool> {
        // The spares and the prepared segment leave the table: the log is
        // stopped, so no rotation takes them. A `prepare_next_segment`
        // after this (a checkpoint that found work, which the close's own
        // checkpoint leaves none for) makes a new first step under the
        // prepared segment's name, as preparing always may.
        let (active, spares, prepared) = {
            let mut table = self.table();
            let [active] = table.live[..] else {
                return Ok(false);
            };
            let spares = std::mem::take(&mut table.spares);
            (active, spares, table.prepared.take())
        };
        let space = self.active_space();
        assert_eq!(space.id, active.id, "the only live segment is the active one");
        assert!(
            active.first_lsn <= covered.next(),
            "the checkpoint covers every record of the active segment"
        );
        let first_step = self.options.first_step_bytes();
        // Bounded by SPARES_MAX. Each removal is durable with the
        // directory sync below (or the replacement's); a crash before it
        // leaves a spare, which the next open keeps or removes.
        for path in &spares {
            self.storage
                .remove_file(path)
                .map_err(|e| Error::io("remove spare segment at close", path, e))?;
        }
        if let Some((file, _)) = &prepared {
            assert_eq!(file.id, active.id.next(), "the prepared segment is the next");
            segment::cut_back(file, first_step)?;
        }
        if space.capacity() > first_step {
            // A new file under a temporary name, synced, then renamed over
            // the old one and the directory synced: a crash leaves the old
            // segment or the new one, never a mix.
            let made = segment::prepare(
                &self.storage,
                &self.dir,
                self.database,
                active.id,
                covered.next(),
                &self.options,
            )?;
            assert_eq!(made.size_bytes, first_step);
        } else if !spares.is_empty() {
            let dir = &self.dir;
            self.storage
                .sync_dir(dir)
                .map_err(|e| Error::io("sync wal directory", dir, e))?;
        }
        Ok(true)
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
