//! A [`Storage`] that counts the bytes the engine writes, by what they are for, on top of
//! [`FsStorage`]: the benches report bytes written per checkpoint save with it.
//!
//! Every `StorageFile::write_at` is charged to one [`WriteClass`], chosen from the path the file
//! was opened under and the write itself: a WAL segment's header and zero fill (written once,
//! when the segment is prepared) are [`WriteClass::SegmentPrep`]; any other write to a segment
//! is [`WriteClass::Log`] (records; an all-zero write is never a record, since an all-zero
//! record header never validates); `.redb` files are [`WriteClass::State`]; everything else
//! (the manifest copies) is [`WriteClass::Other`]. A segment is written through the handle
//! opened under its temporary name, so segment files are recognised by either name.
//!
//! **Invariant:** every byte passed to `write_at` is counted exactly once, in one class, and
//! only after the write succeeded.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actum::storage::DirLock;
use actum::wal::format::SEGMENT_HEADER_BYTES;
use actum::{FsStorage, OpenMode, Storage, StorageFile};

/// What a write was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteClass {
    /// WAL records.
    Log,
    /// A WAL segment's header and zero fill, written when it is prepared.
    SegmentPrep,
    /// The redb state store (checkpoints write it).
    State,
    /// Anything else: the manifest copies.
    Other,
}

/// Bytes written so far, per [`WriteClass`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteTotals {
    /// WAL record bytes.
    pub log_bytes: u64,
    /// WAL segment preparation bytes (header and zero fill).
    pub segment_prep_bytes: u64,
    /// redb state store bytes.
    pub state_bytes: u64,
    /// Manifest and other bytes.
    pub other_bytes: u64,
}

impl WriteTotals {
    /// What was written between `earlier` and `self` (both from the same [`WriteCounts`]).
    pub fn since(self, earlier: WriteTotals) -> WriteTotals {
        let delta = |now: u64, then: u64| {
            assert!(now >= then, "write counters only grow");
            now - then
        };
        WriteTotals {
            log_bytes: delta(self.log_bytes, earlier.log_bytes),
            segment_prep_bytes: delta(self.segment_prep_bytes, earlier.segment_prep_bytes),
            state_bytes: delta(self.state_bytes, earlier.state_bytes),
            other_bytes: delta(self.other_bytes, earlier.other_bytes),
        }
    }

    /// Bytes that carry data: log, state store and manifest (segment preparation excluded: it
    /// reserves space for later records and is written once per segment).
    pub fn data_bytes(self) -> u64 {
        self.log_bytes + self.state_bytes + self.other_bytes
    }

    /// A one-line account of `self` divided over `count` operations, e.g. per save.
    pub fn per(self, count: u64, what: &str) -> String {
        let count = count.max(1);
        format!(
            "{} bytes per {what} (log {}, state store {}, manifest {}), plus {} of WAL segment \
             preparation",
            self.data_bytes() / count,
            self.log_bytes / count,
            self.state_bytes / count,
            self.other_bytes / count,
            self.segment_prep_bytes / count
        )
    }
}

/// The shared counters a [`CountingStorage`] and its files add to.
#[derive(Debug, Default)]
pub struct WriteCounts {
    log: AtomicU64,
    segment_prep: AtomicU64,
    state: AtomicU64,
    other: AtomicU64,
}

impl WriteCounts {
    /// The totals so far.
    pub fn totals(&self) -> WriteTotals {
        WriteTotals {
            log_bytes: self.log.load(Ordering::Relaxed),
            segment_prep_bytes: self.segment_prep.load(Ordering::Relaxed),
            state_bytes: self.state.load(Ordering::Relaxed),
            other_bytes: self.other.load(Ordering::Relaxed),
        }
    }

    fn add(&self, class: WriteClass, bytes: u64) {
        let counter = match class {
            WriteClass::Log => &self.log,
            WriteClass::SegmentPrep => &self.segment_prep,
            WriteClass::State => &self.state,
            WriteClass::Other => &self.other,
        };
        counter.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// What kind of file a path names, as far as counting goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FileKind {
    Segment,
    State,
    Other,
}

fn file_kind(path: &Path) -> FileKind {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name.ends_with(".wal") || name.ends_with(".wal.tmp") {
        FileKind::Segment
    } else if name.ends_with(".redb") {
        FileKind::State
    } else {
        FileKind::Other
    }
}

/// Which class one write falls in.
fn classify(kind: FileKind, offset: u64, data: &[u8]) -> WriteClass {
    match kind {
        FileKind::Segment if offset < SEGMENT_HEADER_BYTES || data.iter().all(|b| *b == 0) => {
            WriteClass::SegmentPrep
        }
        FileKind::Segment => WriteClass::Log,
        FileKind::State => WriteClass::State,
        FileKind::Other => WriteClass::Other,
    }
}

/// [`FsStorage`], counting every byte written (see the module docs).
#[derive(Debug, Default)]
pub struct CountingStorage {
    inner: FsStorage,
    counts: Arc<WriteCounts>,
}

impl CountingStorage {
    /// The real file system, with fresh counters.
    pub fn new() -> CountingStorage {
        CountingStorage::default()
    }

    /// The counters, to read while the engine runs.
    pub fn counts(&self) -> Arc<WriteCounts> {
        Arc::clone(&self.counts)
    }
}

#[derive(Debug)]
struct CountingFile {
    inner: Box<dyn StorageFile>,
    kind: FileKind,
    counts: Arc<WriteCounts>,
}

impl StorageFile for CountingFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.inner.write_at(offset, data)?;
        self.counts
            .add(classify(self.kind, offset, data), data.len() as u64);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.inner.set_len(len_bytes)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.inner.sync_data()
    }
}

impl Storage for CountingStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.inner.open(path, mode)?;
        Ok(Box::new(CountingFile {
            inner,
            kind: file_kind(path),
            counts: Arc::clone(&self.counts),
        }))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.inner.exists(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        self.inner.lock_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_are_counted_once_in_the_class_their_file_and_bytes_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = CountingStorage::new();
        let counts = storage.counts();
        let open = |name: &str| {
            storage
                .open(&dir.path().join(name), OpenMode::CreateNew)
                .expect("create")
        };
        let segment = open("00000000000000000001.wal.tmp");
        segment.write_at(0, &[7; 64]).expect("header");
        segment
            .write_at(SEGMENT_HEADER_BYTES, &[0; 1000])
            .expect("fill");
        segment
            .write_at(SEGMENT_HEADER_BYTES, &[1; 300])
            .expect("record");
        open("state.redb").write_at(0, &[2; 50]).expect("state");
        open("MANIFEST-0").write_at(0, &[3; 20]).expect("manifest");
        let totals = counts.totals();
        assert_eq!(
            totals,
            WriteTotals {
                log_bytes: 300,
                segment_prep_bytes: 1064,
                state_bytes: 50,
                other_bytes: 20,
            }
        );
        assert_eq!(totals.data_bytes(), 370);
        assert_eq!(totals.since(totals), WriteTotals::default());
    }
}
