//! The writer: what a group-commit leader does with a group of batches.
//!
//! It encodes every record with the group's ack watermark and the writer's
//! epoch, writes the bytes into the preallocated active segment starting at
//! a group boundary (rotating to the next segment when a batch does not fit
//! the rest of it), marks the last record written to each segment as the
//! end of the write, and `fdatasync`s every segment it touched once. It
//! writes only below the active segment's capacity, which grows ahead of
//! it off the commit path; only a write that finds that space too short
//! grows the segment itself first (counted in `WalStats::inline_grows`).
//!
//! **Invariant:** a batch never spans segments (a batch is at most one
//! segment's capacity, checked before it is queued), so the "more records
//! follow" flag of a batch is always resolved within one segment; every
//! write starts at a multiple of `GROUP_ALIGN_BYTES`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::format::{self, RECORD_HEADER_BYTES, RecordMeta, SEGMENT_HEADER_BYTES};
use super::group::Entry;
use super::segment::SegmentFile;
use super::table::{ActiveSpace, Context, Counters};
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::planted::{PlantedBug, planted};

/// A batch as queued: the payloads copied into one buffer.
#[derive(Debug)]
pub struct Batch {
    bytes: Vec<u8>,
    lens: Vec<usize>,
}

impl Batch {
    /// Copies `payloads` into a batch.
    pub fn new(payloads: &[&[u8]]) -> Batch {
        let total = payloads.iter().map(|p| p.len()).sum();
        let mut bytes = Vec::with_capacity(total);
        for payload in payloads {
            bytes.extend_from_slice(payload);
        }
        let batch = Batch {
            bytes,
            lens: payloads.iter().map(|p| p.len()).collect(),
        };
        assert_eq!(batch.bytes.len(), total);
        batch
    }

    /// Number of records.
    pub fn count(&self) -> u64 {
        self.lens.len() as u64
    }

    /// Encoded size in bytes of all its records.
    pub fn encoded_bytes(&self) -> u64 {
        self.bytes.len() as u64 + self.count() * RECORD_HEADER_BYTES as u64
    }

    fn payloads(&self) -> impl Iterator<Item = &[u8]> {
        let mut at = 0;
        self.lens.iter().map(move |&len| {
            let payload = &self.bytes[at..at + len];
            at += len;
            payload
        })
    }
}

/// The active segment and the write position in it.
#[derive(Debug)]
pub struct Writer {
    /// The segment being written.
    pub active: SegmentFile,
    /// Its space, shared with the grows.
    space: Arc<ActiveSpace>,
    /// Offset just past the last record written to `active` (the next
    /// write starts at the group boundary at or after it).
    pub offset: u64,
    /// The epoch every record this writer encodes carries.
    epoch: u64,
    buf: Vec<u8>,
    dirty: bool,
    /// What must be durable before this writer's first write.
    first_write: FirstWrite,
}

/// What an open leaves to the first write of its log: the syncs recovery
/// deferred (a log that ended at its clean shutdown) and the callers' own
/// steps (the database makes its manifest's new epoch durable; the state
/// store, opened without a sync, its file).
#[derive(Default)]
pub struct FirstWrite {
    /// Sync the live segments and the WAL directory first.
    pub sync_log: bool,
    /// Then these, in order, once.
    pub then: Vec<Box<dyn FnOnce() -> Result<()> + Send>>,
}

impl std::fmt::Debug for FirstWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstWrite")
            .field("sync_log", &self.sync_log)
            .field("then", &self.then.len())
            .finish()
    }
}

impl Writer {
    /// A writer appending to `active` (whose space is `space`) after
    /// `offset`, in `epoch`.
    pub fn new(active: SegmentFile, space: Arc<ActiveSpace>, offset: u64, epoch: u64) -> Writer {
        assert!(offset >= SEGMENT_HEADER_BYTES && offset <= active.size_bytes);
        assert_eq!(space.id, active.id, "the space is the active segment's");
        assert!(epoch >= 1, "epochs start at 1");
        Writer {
            active,
            space,
            offset,
            epoch,
            buf: Vec::new(),
            dirty: false,
            first_write: FirstWrite::default(),
        }
    }

    /// Sets what must be durable before the first write (see
    /// [`FirstWrite`]); replaces what was set.
    pub fn before_first_write(&mut self, first: FirstWrite) {
        self.first_write = first;
    }

    /// Adds the caller's step to what runs before the first write, after
    /// the steps added before it.
    pub fn then_before_first_write(&mut self, then: Box<dyn FnOnce() -> Result<()> + Send>) {
        self.first_write.then.push(then);
    }

    /// The leader's flush: encode, write, rotate as needed, sync once per
    /// touched segment. Any error is the poison cause.
    pub fn flush(&mut self, ctx: &Context, group: &[Entry<Batch>], ack: Lsn) -> Result<()> {
        assert!(!group.is_empty(), "a leader flushes at least one batch");
        assert!(
            group[0].first > ack,
            "records are written after their ack watermark"
        );
        // Taken before it runs: a failure poisons the log, so it never
        // runs twice.
        let first = std::mem::take(&mut self.first_write);
        if first.sync_log && !planted(&ctx.options, PlantedBug::FirstWriteSkipsOpenSyncs) {
            ctx.sync_log_for_first_write(&self.active)?;
        }
        for then in first.then {
            then()?;
        }
        self.buf.clear();
        self.offset = format::align_up(self.offset).min(self.space.limit);
        let rotations = self.plan_rotations(ctx, group);
        for (index, entry) in group.iter().enumerate() {
            if rotations[index] {
                self.write_buf(ctx)?;
                self.sync_active(ctx)?;
                let (next, space) = ctx.install_next(self.active.id.next(), entry.first)?;
                self.active = next;
                self.space = space;
                self.offset = SEGMENT_HEADER_BYTES;
            }
            // The last record of a write to a segment ends the write.
            let ends_write = index + 1 == group.len() || rotations[index + 1];
            let mut lsn = entry.first;
            let count = entry.item.count();
            for (at, payload) in entry.item.payloads().enumerate() {
                let last_of_batch = (at as u64) + 1 == count;
                let meta = RecordMeta {
                    lsn,
                    ack,
                    epoch: self.epoch,
                    more: !last_of_batch,
                    group_end: last_of_batch && ends_write,
                };
                format::encode_record(&mut self.buf, self.active.seed, meta, payload);
                lsn = lsn.next();
            }
            assert_eq!(lsn, entry.last.next(), "a batch's LSNs are contiguous");
            ctx.counters.records.fetch_add(count, Ordering::Relaxed);
        }
        self.write_buf(ctx)?;
        self.sync_active(ctx)?;
        Counters::bump(&ctx.counters.groups);
        Ok(())
    }

    /// For each batch of `group`, whether it starts the next segment
    /// because it does not fit the rest of the current one.
    fn plan_rotations(&self, ctx: &Context, group: &[Entry<Batch>]) -> Vec<bool> {
        let mut end = self.offset;
        let mut size = self.space.limit;
        group
            .iter()
            .map(|entry| {
                let bytes = entry.item.encoded_bytes();
                if end + bytes > size {
                    size = ctx.options.segment_size_bytes;
                    end = SEGMENT_HEADER_BYTES + bytes;
                    assert!(
                        end <= size,
                        "a batch fits an empty segment (checked when queued)"
                    );
                    true
                } else {
                    end += bytes;
                    false
                }
            })
            .collect()
    }

    fn write_buf(&mut self, ctx: &Context) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let end = self.offset + self.buf.len() as u64;
        assert!(end <= self.space.limit, "a write never passes its segment");
        if end > self.space.capacity() {
            // The grows ahead did not keep up: grow now, on the commit path.
            ctx.grow_inline(&self.space, end)?;
        }
        assert!(end <= self.space.capacity(), "the writer writes in grown space");
        self.active
            .file
            .write_at(self.offset, &self.buf)
            .map_err(|e| Error::io("write wal records", &self.active.path, e))?;
        ctx.counters
            .bytes
            .fetch_add(self.buf.len() as u64, Ordering::Relaxed);
        self.offset = end;
        self.buf.clear();
        self.dirty = true;
        if self.space.wants_growth(end) {
            ctx.grow_wanted.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Syncs the active segment if anything was written to it since its
    /// last sync. Never retried: an error poisons the log.
    fn sync_active(&mut self, ctx: &Context) -> Result<()> {
        if !self.dirty || planted(&ctx.options, PlantedBug::AckBeforeFsync) {
            return Ok(());
        }
        Counters::bump(&ctx.counters.fsyncs);
        self.active
            .file
            .sync_data()
            .map_err(|e| Error::io("sync wal segment", &self.active.path, e))?;
        self.dirty = false;
        Ok(())
    }
}
