//! Shared helpers for the manifest's store tests: a fresh database directory
//! on the real file system, raw access to copy files for damaging them, and
//! a storage wrapper that records the order of writes and syncs.
//!
//! **Invariant:** every helper goes through the `Storage` seam, like the
//! engine itself.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tempfile::TempDir;

use super::content::Manifest;
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::storage::{DirLock, FsStorage, OpenMode, Storage, StorageFile};

/// A temporary database directory and the storage it lives on.
pub(super) struct Db {
    _tmp: TempDir,
    pub(super) dir: PathBuf,
    pub(super) storage: Arc<dyn Storage>,
}

/// A fresh, empty database directory.
pub(super) fn new_db() -> Db {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("db");
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    storage.create_dir_all(&dir).expect("create db dir");
    Db {
        _tmp: tmp,
        dir,
        storage,
    }
}

/// The first manifest of the test database.
pub(super) fn initial() -> Manifest {
    Manifest::new(DatabaseId(0xdb), "state.redb")
}

/// `previous` advanced by one checkpoint: sequence, applied LSN, segment and
/// (so lengths vary) the state file name all change.
pub(super) fn advanced(previous: &Manifest) -> Manifest {
    let mut next = previous.next();
    next.applied_lsn = Lsn(previous.applied_lsn.0 + 100);
    next.first_live_segment = SegmentId(previous.first_live_segment.0 + 1);
    next.state_file = format!("state-{}.redb", next.sequence);
    next.clean_shutdown_lsn = next
        .sequence
        .is_multiple_of(2)
        .then_some(Lsn(next.applied_lsn.0 + 5));
    next
}

/// The whole contents of the file at `path`.
pub(super) fn read_all(storage: &dyn Storage, path: &Path) -> Vec<u8> {
    let file = storage.open(path, OpenMode::Existing).expect("open");
    let mut bytes = vec![0u8; file.len().expect("len") as usize];
    file.read_at(0, &mut bytes).expect("read");
    bytes
}

/// Writes `bytes` at `offset` of the existing file at `path`, synced.
pub(super) fn write_raw(storage: &dyn Storage, path: &Path, offset: u64, bytes: &[u8]) {
    let file = storage.open(path, OpenMode::Existing).expect("open");
    file.write_at(offset, bytes).expect("write");
    file.sync_data().expect("sync");
}

/// Cuts the file at `path` to `len_bytes`.
pub(super) fn truncate(storage: &dyn Storage, path: &Path, len_bytes: u64) {
    let file = storage.open(path, OpenMode::Existing).expect("open");
    file.set_len(len_bytes).expect("set_len");
    file.sync_data().expect("sync");
}

/// `len` deterministic pseudo-random bytes (xorshift), never starting with
/// the manifest magic.
pub(super) fn garbage(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// A `Storage` over the real file system that records, in order, every
/// write and sync the engine issues (by file name), and can be told to fail
/// the next `sync_data`.
#[derive(Debug, Default)]
pub(crate) struct RecordingStorage {
    inner: FsStorage,
    log: Arc<Mutex<Vec<String>>>,
    /// Bytes read, by file name (not in the log: reads do not order).
    read: Arc<Mutex<BTreeMap<String, u64>>>,
    fail_next_sync: Arc<AtomicBool>,
}

impl RecordingStorage {
    /// The operations recorded so far, emptying the record.
    pub(crate) fn take_log(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().expect("log"))
    }

    /// The bytes read so far, by file name, emptying the tally.
    pub(crate) fn take_reads(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.read.lock().expect("reads"))
    }

    /// Makes the next `sync_data` on any file fail with an I/O error.
    pub(super) fn fail_next_sync(&self) {
        self.fail_next_sync.store(true, Ordering::SeqCst);
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[derive(Debug)]
struct RecordingFile {
    inner: Box<dyn StorageFile>,
    name: String,
    log: Arc<Mutex<Vec<String>>>,
    read: Arc<Mutex<BTreeMap<String, u64>>>,
    fail_next_sync: Arc<AtomicBool>,
}

impl RecordingFile {
    fn record(&self, op: &str) {
        self.log
            .lock()
            .expect("log")
            .push(format!("{op} {}", self.name));
    }
}

impl StorageFile for RecordingFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        *self
            .read
            .lock()
            .expect("reads")
            .entry(self.name.clone())
            .or_default() += buf.len() as u64;
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.record("write");
        self.inner.write_at(offset, data)
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.record("set_len");
        self.inner.set_len(len_bytes)
    }
    fn sync_data(&self) -> io::Result<()> {
        if self.fail_next_sync.swap(false, Ordering::SeqCst) {
            self.record("failed sync_data");
            return Err(io::Error::other("injected fsync failure"));
        }
        self.record("sync_data");
        self.inner.sync_data()
    }
}

impl Storage for RecordingStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.inner.open(path, mode)?;
        if mode != OpenMode::Existing {
            self.log
                .lock()
                .expect("log")
                .push(format!("open {mode:?} {}", file_name(path)));
        }
        Ok(Box::new(RecordingFile {
            inner,
            name: file_name(path),
            log: self.log.clone(),
            read: self.read.clone(),
            fail_next_sync: self.fail_next_sync.clone(),
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
        self.log.lock().expect("log").push("sync_dir".to_string());
        self.inner.sync_dir(dir)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        self.inner.lock_dir(dir)
    }
}
