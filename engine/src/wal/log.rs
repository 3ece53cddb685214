//! `Wal`: the write-ahead log's public facade, tying the group-commit
//! kernel, the writer, readers, preparation and garbage collection together.
//!
//! **Invariant:** `append` returns an LSN only once that record and every
//! record before it are durable; after any commit-path I/O error every
//! append fails with `Error::Poisoned` until the log is reopened.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use super::format::{self, SEGMENT_HEADER_BYTES};
use super::group::GroupCommit;
use super::reader::WalIter;
use super::recovery::{self, LogRoot};
use super::segment;
use super::table::{ActiveSpace, Context, Counters, LiveSegment, SPARES_MAX, SegmentTable};
use super::writer::{Batch, FirstWrite, Writer};
use super::{RecoveryReport, WalOptions, WalStats};
use crate::error::{Error, Result};
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::storage::Storage;

/// The epoch of the records a new log is created with; every later open
/// writes in a higher one.
pub const FIRST_EPOCH: u64 = 1;

/// The segmented, checksummed write-ahead log with group commit.
#[derive(Debug)]
pub struct Wal {
    ctx: Context,
    group: GroupCommit<Batch, Writer, Arc<Error>>,
}

impl Wal {
    /// Creates a new empty log in `dir` (created if missing, directory
    /// synced): first segment `SegmentId(1)`, first LSN `Lsn(1)`, written in
    /// epoch [`FIRST_EPOCH`]. Fails with `InvalidConfig` if `dir` already
    /// holds segments.
    pub fn create(
        storage: Arc<dyn Storage>,
        dir: &Path,
        db: DatabaseId,
        options: WalOptions,
    ) -> Result<Wal> {
        options.validate()?;
        storage
            .create_dir_all(dir)
            .map_err(|e| Error::io("create wal directory", dir, e))?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            storage
                .sync_dir(parent)
                .map_err(|e| Error::io("sync parent of wal directory", parent, e))?;
        }
        let names = storage
            .list_dir(dir)
            .map_err(|e| Error::io("list wal directory", dir, e))?;
        if names
            .iter()
            .any(|n| format::parse_segment_file_name(n).is_some())
        {
            return Err(Error::InvalidConfig {
                reason: format!("{} already holds a write-ahead log", dir.display()),
            });
        }
        let first = segment::prepare(&storage, dir, db, SegmentId(1), Lsn(1), &options)?;
        let live = vec![LiveSegment {
            id: SegmentId(1),
            first_lsn: Lsn(1),
        }];
        let space = ActiveSpace::open(&storage, &first, &options)?;
        let writer = Writer::new(first, Arc::clone(&space), SEGMENT_HEADER_BYTES, FIRST_EPOCH);
        Ok(Wal::assemble(
            storage,
            dir,
            db,
            options,
            SegmentTable {
                live,
                prepared: None,
                spares: Vec::new(),
            },
            (writer, space),
            Lsn::ZERO,
        ))
    }

    /// Opens an existing log and runs recovery (see `docs/DURABILITY.md`).
    /// `root` holds what the manifest says: the oldest live segment, the
    /// LSN a state checkpoint already covers, and the clean-shutdown LSN if
    /// the manifest is known to be the newest; segments numbered below the
    /// oldest live one are deleted as leftovers of an interrupted garbage
    /// collection. Records appended from now on carry
    /// `epoch`, which must be higher than the epoch of every earlier open
    /// (and of [`Wal::create`]): the caller keeps it durable (the database
    /// uses its manifest's sequence number) before the first append.
    pub fn open(
        storage: Arc<dyn Storage>,
        dir: &Path,
        db: DatabaseId,
        options: WalOptions,
        root: LogRoot,
        epoch: u64,
    ) -> Result<(Wal, RecoveryReport)> {
        Wal::open_then(storage, dir, db, options, root, epoch, &mut || Ok(()))
    }

    /// [`Wal::open`], running `before_syncs` before recovery syncs the
    /// segments it read and changes anything: that is, unless the log ends
    /// at `root.clean_end` with nothing after it, when the syncs wait for
    /// the first write (docs/DURABILITY.md, "Opening a cleanly closed
    /// database").
    pub fn open_then(
        storage: Arc<dyn Storage>,
        dir: &Path,
        db: DatabaseId,
        options: WalOptions,
        root: LogRoot,
        epoch: u64,
        before_syncs: &mut dyn FnMut() -> Result<()>,
    ) -> Result<(Wal, RecoveryReport)> {
        options.validate()?;
        assert!(
            epoch > FIRST_EPOCH,
            "an open's epoch is above the creation's"
        );
        let found = recovery::recover(&storage, dir, db, &options, root, before_syncs)?;
        let last = found.report.last_lsn;
        let space = ActiveSpace::open(&storage, &found.active, &options)?;
        let prepared = match found.prepared {
            Some(file) => {
                let space = ActiveSpace::open(&storage, &file, &options)?;
                Some((file, space))
            }
            None => None,
        };
        let mut writer = Writer::new(found.active, Arc::clone(&space), found.offset, epoch);
        writer.before_first_write(FirstWrite {
            sync_log: found.syncs_deferred,
            then: Vec::new(),
        });
        let wal = Wal::assemble(
            storage,
            dir,
            db,
            options,
            SegmentTable {
                live: found.live,
                prepared,
                spares: found.spares,
            },
            (writer, space),
            last,
        );
        Ok((wal, found.report))
    }

    fn assemble(
        storage: Arc<dyn Storage>,
        dir: &Path,
        database: DatabaseId,
        options: WalOptions,
        table: SegmentTable,
        (writer, space): (Writer, Arc<ActiveSpace>),
        durable: Lsn,
    ) -> Wal {
        assert!(!table.live.is_empty(), "a log always has an active segment");
        assert_eq!(table.live.last().map(|s| s.id), Some(writer.active.id));
        assert_eq!(space.id, writer.active.id);
        assert!(table.spares.len() <= SPARES_MAX);
        // An open whose log already fills more than half of its active
        // segment's space grows it at the first chance.
        let grow_wanted = space.wants_growth(writer.offset);
        let ctx = Context {
            storage,
            dir: dir.to_path_buf(),
            database,
            options,
            table: Mutex::new(table),
            prepare_lock: Mutex::new(()),
            active: Mutex::new(space),
            grow_wanted: grow_wanted.into(),
            counters: Counters::default(),
        };
        Wal {
            ctx,
            group: GroupCommit::new(writer, durable),
        }
    }

    /// Runs `then` before the first write of records, after the syncs
    /// recovery left to it (if any) and the steps added before it, on the
    /// thread that leads that flush;
    /// an error fails the flush and poisons the log. For the caller's own
    /// step before records of this open's epoch may land (the database
    /// makes its manifest's sequence reach the epoch). Call it before the
    /// first append.
    pub fn before_first_write(&self, then: Box<dyn FnOnce() -> Result<()> + Send>) {
        self.group
            .with_writer(|writer| writer.then_before_first_write(then));
    }

    /// Appends `batch` atomically (after a crash all of its records survive
    /// or none) and returns the LSN of its last record once it is durable.
    /// An empty batch writes nothing and returns the durable LSN.
    pub fn append(&self, batch: &[&[u8]]) -> Result<Lsn> {
        if batch.is_empty() {
            if let Some(cause) = self.group.poison() {
                return Err(Error::Poisoned { cause });
            }
            return Ok(self.durable_lsn());
        }
        let last = self.enqueue(batch)?;
        self.wait_durable(last)
    }

    /// Queues a non-empty batch for the next group commit without waiting;
    /// returns the LSN its last record will have. Nothing is durable until
    /// [`Wal::wait_durable`] for that LSN returns `Ok`. LSNs follow enqueue
    /// order, so a caller that enqueues under its own lock fixes the order
    /// of its records in the log.
    pub fn enqueue(&self, batch: &[&[u8]]) -> Result<Lsn> {
        assert!(!batch.is_empty(), "enqueue takes a non-empty batch");
        let max_bytes = self.ctx.options.max_record_bytes;
        if let Some(big) = batch.iter().find(|p| p.len() as u64 > max_bytes) {
            let size_bytes = big.len() as u64;
            return Err(Error::RecordTooLarge {
                size_bytes,
                max_bytes,
            });
        }
        let batch = Batch::new(batch);
        let capacity = self.ctx.options.segment_capacity_bytes();
        if batch.encoded_bytes() > capacity {
            // A batch never spans segments, so it must fit an empty one.
            let size_bytes = batch.encoded_bytes();
            return Err(Error::RecordTooLarge {
                size_bytes,
                max_bytes: capacity,
            });
        }
        let count = batch.count();
        let last = self
            .group
            .enqueue(batch, count)
            .map_err(|cause| Error::Poisoned { cause })?;
        assert!(last.0 >= count);
        Counters::bump(&self.ctx.counters.appends);
        Ok(last)
    }

    /// Waits until `lsn` (from [`Wal::enqueue`]) is durable, leading the
    /// group commit (one write, one `fdatasync`) if no one else is.
    pub fn wait_durable(&self, lsn: Lsn) -> Result<Lsn> {
        let ctx = &self.ctx;
        let last = self
            .group
            .wait_durable(lsn, |writer, group, ack| {
                writer.flush(ctx, group, ack).map_err(Arc::new)
            })
            .map_err(|cause| Error::Poisoned { cause })?;
        assert!(last == lsn && self.durable_lsn() >= last);
        Ok(last)
    }

    /// An iterator over durable records with LSN `>= from` (`Lsn::ZERO`
    /// means the first record still held), in order, read segment by
    /// segment. Fails with `LsnOutOfRange` if `from` was garbage-collected
    /// or lies beyond the durable LSN plus one.
    pub fn read_from(&self, from: Lsn) -> Result<WalIter> {
        let end = self.durable_lsn();
        let mut live: VecDeque<LiveSegment> = self.ctx.table().live.iter().copied().collect();
        let first = live
            .front()
            .expect("live segments are never empty")
            .first_lsn;
        let from = if from == Lsn::ZERO { first } else { from };
        if from < first || from > end.next() {
            return Err(Error::LsnOutOfRange {
                requested: from,
                first,
                last: end,
            });
        }
        // Start in the segment holding `from`.
        while live.get(1).is_some_and(|s| s.first_lsn <= from) {
            live.pop_front();
        }
        assert!(live.front().is_some_and(|s| s.first_lsn <= from));
        Ok(WalIter::new(
            Arc::clone(&self.ctx.storage),
            self.ctx.dir.clone(),
            self.ctx.database,
            live,
            from,
            end,
        ))
    }

    /// The LSN the next enqueued record will get. Under a lock that every
    /// enqueuer takes, it is the LSN the caller's next record will have.
    pub fn next_lsn(&self) -> Lsn {
        self.group.next_lsn()
    }

    /// The highest LSN known durable.
    pub fn durable_lsn(&self) -> Lsn {
        self.group.durable_lsn()
    }

    /// The oldest live segment.
    pub fn first_segment(&self) -> SegmentId {
        self.ctx
            .table()
            .live
            .first()
            .expect("live segments are never empty")
            .id
    }

    /// The oldest live segment once `remove_covered_segments(covered)` has
    /// run: what a checkpoint's manifest update must name *before* the
    /// segments are removed.
    pub fn first_live_segment_after(&self, covered: Lsn) -> SegmentId {
        let table = self.ctx.table();
        let count = covered_segment_count(&table.live, covered);
        assert!(count < table.live.len(), "the active segment always stays");
        table.live[count].id
    }

    /// Garbage collection after a checkpoint covering `covered`: drops
    /// whole segments all of whose records are `<= covered`, never the
    /// active one, from the log; keeps up to `SPARES_MAX` of their files
    /// for recycling and removes the rest (then syncs the directory);
    /// returns the oldest live segment. Record the result in the manifest
    /// (see `docs/DURABILITY.md`).
    pub fn remove_covered_segments(&self, covered: Lsn) -> Result<SegmentId> {
        let durable = self.durable_lsn();
        if covered > durable {
            return Err(Error::InvalidConfig {
                reason: format!("cannot cover {covered}: only up to {durable} is durable"),
            });
        }
        self.remove_segments_before(self.first_live_segment_after(covered))
    }

    /// Drops the live segments older than `first`, the oldest live segment
    /// a checkpoint named in the manifest ([`Wal::first_live_segment_after`]),
    /// as [`Wal::remove_covered_segments`] does; returns `first`. The
    /// segment is named once, before the manifest update: commits go on
    /// meanwhile, and if the active segment ended exactly at the covered
    /// LSN, a rotation since makes it covered too, and working out the
    /// covered segments again would remove the one the manifest names.
    pub fn remove_segments_before(&self, first: SegmentId) -> Result<SegmentId> {
        let doomed = {
            let mut table = self.ctx.table();
            let count = table.live.iter().take_while(|s| s.id < first).count();
            assert!(
                table.live.get(count).is_some_and(|s| s.id == first),
                "segment {first:?} is live"
            );
            table.live.drain(..count).map(|s| s.id).collect::<Vec<SegmentId>>()
        };
        let mut removed = false;
        for &id in &doomed {
            let path = format::segment_path(&self.ctx.dir, id);
            if self.ctx.keep_spare(path.clone()) {
                continue;
            }
            self.ctx
                .storage
                .remove_file(&path)
                .map_err(|e| Error::io("remove covered segment", &path, e))?;
            removed = true;
        }
        if removed {
            let dir = &self.ctx.dir;
            self.ctx
                .storage
                .sync_dir(dir)
                .map_err(|e| Error::io("sync wal directory", dir, e))?;
        }
        Ok(first)
    }

    /// Creates, preallocates and syncs the next segment ahead of need, so
    /// rotation on the commit path is a cheap switch. A no-op if done.
    pub fn prepare_next_segment(&self) -> Result<()> {
        self.ctx.prepare_ahead(self.durable_lsn().next())
    }

    /// Whether the segment being written wants a grow: its writer's last
    /// write left less than half of its space (one atomic load, cheap
    /// enough to ask after every commit).
    pub fn grow_wanted(&self) -> bool {
        self.ctx.grow_wanted.load(Ordering::Relaxed)
    }

    /// Grows the segment being written one step ahead of need if
    /// [`Wal::grow_wanted`]: doubles its file (zero-filled, then synced)
    /// up to `segment_size_bytes`, while appends go on below the old
    /// length. Returns whether it grew; a no-op if another preparation or
    /// grow is under way. On an error the segment keeps its old space and
    /// the log stays usable: a write that needs the space grows it itself.
    pub fn grow_ahead(&self) -> Result<bool> {
        self.ctx.grow_ahead()
    }

    /// Stops the log and shrinks its files, for a clean close after a
    /// durable checkpoint recorded in the manifest covers every record:
    /// `covered` is that checkpoint's LSN, which must be the durable LSN
    /// with nothing in flight. The spare files are removed, the prepared
    /// segment is cut back to its first step, and the active segment, if
    /// it grew past its first step, is replaced by an empty one of that
    /// step; a crash at any step leaves a log that recovers to `covered`
    /// (docs/DURABILITY.md, "Shrinking the log at close"). Every append
    /// after it fails with `Poisoned`: reopen the log to append. Returns
    /// whether it shrank; `false`, with the log untouched, if a record
    /// past `covered` is durable or in flight or an older segment than the
    /// active one is still live.
    pub fn shrink_at_close(&self, covered: Lsn) -> Result<bool> {
        let _preparing = self.ctx.prepare_lock.lock().expect("wal prepare lock");
        if self.ctx.table().live.len() != 1 {
            return Ok(false);
        }
        let dir = self.ctx.dir.display();
        let cause = Arc::new(Error::InvalidConfig {
            reason: format!(
                "the log in {dir} was shrunk by a clean close and takes no more appends: \
                 reopen the database"
            ),
        });
        if !self.group.stop_if_settled_at(covered, cause) {
            return Ok(false);
        }
        assert!(self.group.poison().is_some(), "the log is stopped");
        self.ctx.shrink_locked(covered)
    }

    /// Counters since the log was opened.
    pub fn stats(&self) -> WalStats {
        let c = &self.ctx.counters;
        WalStats {
            appends: c.appends.load(Ordering::Relaxed),
            records: c.records.load(Ordering::Relaxed),
            bytes: c.bytes.load(Ordering::Relaxed),
            groups: c.groups.load(Ordering::Relaxed),
            fsyncs: c.fsyncs.load(Ordering::Relaxed),
            inline_prepares: c.inline_prepares.load(Ordering::Relaxed),
            recycled: c.recycled.load(Ordering::Relaxed),
            grows: c.grows.load(Ordering::Relaxed),
            inline_grows: c.inline_grows.load(Ordering::Relaxed),
        }
    }
}

/// How many of the oldest `live` segments hold only records `<= covered`
/// (each is followed by a segment starting at or below `covered + 1`); the
/// active (last) segment is never counted.
fn covered_segment_count(live: &[super::table::LiveSegment], covered: Lsn) -> usize {
    // Bounded by the number of live segments.
    let count = live
        .windows(2)
        .take_while(|pair| pair[1].first_lsn.0 - 1 <= covered.0)
        .count();
    assert!(count < live.len().max(1));
    count
}
