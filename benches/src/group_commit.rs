//! The group-commit ceiling: one `fdatasync` shared by every record queued while the last one ran.
//!
//! Writers append their record (one 256-byte record, or the rows of one [`DurableRows`]
//! transaction back to back) to a shared queue under a mutex. If no flush is running, the
//! writer becomes the leader: it takes the whole queue, writes it with one positional write into
//! a preallocated, pre-synced file, issues one `fdatasync`, publishes the new durable sequence
//! number and wakes everyone. Otherwise it waits on a condition variable until its record is
//! durable or it can lead the next batch. The lock is never held across I/O.
//!
//! **Invariant:** `durable <= enqueued`, and a writer returns only once `durable` covers its
//! sequence number.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::raw::{PREALLOCATED_BYTES, create_preallocated};
use crate::{DurableLog, DurableRows, RECORD_BYTES, record};

/// Bytes a queue may hold before writers wait for the running flush: 4,096 records of 256 bytes
/// (a named bound; with at most 64 writers it is never reached).
pub const QUEUE_BYTES_MAX: usize = 4096 * RECORD_BYTES;

const _: () = assert!((QUEUE_BYTES_MAX as u64) < PREALLOCATED_BYTES);

#[derive(Default)]
struct Queue {
    /// Bytes of the records not yet handed to a leader (at most [`QUEUE_BYTES_MAX`]).
    pending: Vec<u8>,
    /// A cleared buffer handed back by the last leader, reused to avoid allocating per batch.
    spare: Vec<u8>,
    /// Sequence number of the last record enqueued.
    enqueued: u64,
    /// Sequence number of the last record known durable.
    durable: u64,
    /// Whether a leader is writing and syncing right now.
    flushing: bool,
    /// Offset in the file where the next batch goes.
    write_offset: u64,
    /// Number of fsyncs issued, for the batch-size sanity check.
    syncs: u64,
}

/// A preallocated file written by leader/follower group commit.
pub struct GroupCommitFile {
    file: File,
    queue: Mutex<Queue>,
    wake: Condvar,
    _dir: tempfile::TempDir,
}

impl GroupCommitFile {
    /// Creates and zero-fills a preallocated file in a fresh scratch directory.
    pub fn new() -> GroupCommitFile {
        let dir = crate::scratch_dir();
        let file = create_preallocated(&dir.path().join("group.log"), PREALLOCATED_BYTES);
        let queue = Queue {
            pending: Vec::with_capacity(QUEUE_BYTES_MAX),
            spare: Vec::with_capacity(QUEUE_BYTES_MAX),
            ..Queue::default()
        };
        GroupCommitFile {
            file,
            queue: Mutex::new(queue),
            wake: Condvar::new(),
            _dir: dir,
        }
    }

    /// Records made durable so far and the fsyncs that did it.
    pub fn counts(&self) -> (u64, u64) {
        let queue = self.lock();
        (queue.durable, queue.syncs)
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().expect("a group-commit writer panicked")
    }

    /// Writes `batch` at `offset` (wrapping to the start when it would not fit) and syncs it.
    fn flush(&self, batch: &[u8], offset: u64) {
        assert!(
            offset + batch.len() as u64 <= PREALLOCATED_BYTES,
            "never grows the file"
        );
        self.file
            .write_all_at(batch, offset)
            .expect("writing a group-commit batch");
        self.file
            .sync_data()
            .expect("fdatasync of a group-commit batch");
    }
}

impl Default for GroupCommitFile {
    fn default() -> Self {
        GroupCommitFile::new()
    }
}

impl DurableLog for GroupCommitFile {
    type Writer<'a> = ();

    fn writer(&self) {}

    fn summary(&self) -> Option<String> {
        let (records, syncs) = self.counts();
        Some(format!(
            "{records} records in {syncs} fsyncs ({:.1} per fsync)",
            per(records, syncs)
        ))
    }

    fn commit(&self, writer: &mut (), ticket: u64) {
        self.commit_rows(writer, ticket, &[&record(ticket)]);
    }
}

impl DurableRows for GroupCommitFile {
    /// The rows go to the queue back to back as one record, so they reach the disk in one batch.
    fn commit_rows(&self, _: &mut (), _first_key: u64, rows: &[&[u8]]) {
        let bytes: usize = rows.iter().map(|row| row.len()).sum();
        assert!(
            bytes > 0 && bytes <= QUEUE_BYTES_MAX,
            "a record fits in the queue"
        );
        let mut queue = self.lock();
        while queue.pending.len() + bytes > QUEUE_BYTES_MAX {
            queue = self
                .wake
                .wait(queue)
                .expect("a group-commit writer panicked");
        }
        for row in rows {
            queue.pending.extend_from_slice(row);
        }
        queue.enqueued += 1;
        let mine = queue.enqueued;
        while queue.durable < mine {
            if queue.flushing {
                queue = self
                    .wake
                    .wait(queue)
                    .expect("a group-commit writer panicked");
                continue;
            }
            // Lead: take the whole queue, flush it without the lock, publish, wake the rest.
            queue.flushing = true;
            let spare = std::mem::take(&mut queue.spare);
            let batch = std::mem::replace(&mut queue.pending, spare);
            let batch_end = queue.enqueued;
            if queue.write_offset + batch.len() as u64 > PREALLOCATED_BYTES {
                queue.write_offset = 0;
            }
            let offset = queue.write_offset;
            queue.write_offset += batch.len() as u64;
            drop(queue);
            self.flush(&batch, offset);
            queue = self.lock();
            assert!(batch_end > queue.durable && batch_end <= queue.enqueued);
            queue.durable = batch_end;
            queue.syncs += 1;
            queue.flushing = false;
            let mut batch = batch;
            batch.clear();
            queue.spare = batch;
            self.wake.notify_all();
        }
    }
}

/// `records / syncs` for summaries, 0 when nothing was synced.
pub fn per(records: u64, syncs: u64) -> f64 {
    if syncs == 0 {
        0.0
    } else {
        records as f64 / syncs as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::run_writers;

    #[test]
    fn batches_share_fsyncs_and_lose_nothing() {
        let log = GroupCommitFile::new();
        run_writers(&log, 8, 0, 400);
        let (durable, syncs) = log.counts();
        assert_eq!(durable, 400);
        assert!(syncs <= 400 && syncs > 0);
    }
}
