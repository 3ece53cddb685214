//! The disk's floor: one positional write plus one `fdatasync` per record, no engine at all.
//!
//! [`AppendFile`] grows its file with every record, so each `fdatasync` also commits the new
//! file size (a journal commit on ext4). [`PreallocatedFile`] writes into space that was
//! zero-filled and synced before timing, so `fdatasync` only flushes data: the best a log that
//! prepares its segments ahead can hope for with one sync per commit. Two of its commits in a
//! row are the effect protocol's floor, three the agent step's.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{DurableLog, DurableRows, RECORD_BYTES, record};

/// Size of a preallocated file. Offsets wrap around inside it, which rewrites already-allocated
/// blocks: the same cost as fresh preallocated ones, without needing to know the record count.
pub const PREALLOCATED_BYTES: u64 = 16 << 20;

const _: () = assert!(PREALLOCATED_BYTES.is_multiple_of(RECORD_BYTES as u64));

/// Opens (creating) `path` for positional reads and writes.
fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .expect("the bench file must be creatable")
}

/// Makes a file's directory entry durable, so the first timed fsync commits nothing but data.
pub fn sync_dir(dir: &Path) {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .expect("the bench directory must be syncable");
}

/// Creates `path` holding `bytes` zero bytes, written and synced (data, size and directory entry).
pub fn create_preallocated(path: &Path, bytes: u64) -> File {
    const CHUNK_BYTES: usize = 1 << 20;
    let file = open_rw(path);
    let zeros = vec![0u8; CHUNK_BYTES];
    let mut offset = 0;
    while offset < bytes {
        let len = (bytes - offset).min(CHUNK_BYTES as u64);
        let len = usize::try_from(len).expect("a chunk fits in usize");
        file.write_all_at(&zeros[..len], offset)
            .expect("zero-filling the bench file");
        offset += len as u64;
    }
    file.sync_all()
        .expect("syncing the preallocated bench file");
    sync_dir(path.parent().expect("a file path has a parent"));
    assert_eq!(file.metadata().expect("stat").len(), bytes);
    file
}

/// A shared file that every record is appended to, at an atomically reserved offset.
pub struct AppendFile {
    file: File,
    end: AtomicU64,
    _dir: tempfile::TempDir,
}

impl AppendFile {
    /// Creates an empty file in a fresh scratch directory.
    pub fn new() -> AppendFile {
        let dir = crate::scratch_dir();
        let path = dir.path().join("append.log");
        let file = open_rw(&path);
        file.sync_all().expect("syncing the empty bench file");
        sync_dir(dir.path());
        AppendFile {
            file,
            end: AtomicU64::new(0),
            _dir: dir,
        }
    }
}

impl Default for AppendFile {
    fn default() -> Self {
        AppendFile::new()
    }
}

impl DurableLog for AppendFile {
    type Writer<'a> = ();

    fn writer(&self) {}

    fn commit(&self, _: &mut (), ticket: u64) {
        let offset = self.end.fetch_add(RECORD_BYTES as u64, Ordering::Relaxed);
        self.file
            .write_all_at(&record(ticket), offset)
            .expect("appending a record");
        self.file
            .sync_data()
            .expect("fdatasync of an appended record");
    }
}

/// A preallocated, pre-synced file; records go to atomically reserved offsets, wrapping around.
pub struct PreallocatedFile {
    file: File,
    /// Bytes reserved so far; a record's offset is this modulo the file's size.
    next_byte: AtomicU64,
    _dir: tempfile::TempDir,
}

impl PreallocatedFile {
    /// Creates and zero-fills a [`PREALLOCATED_BYTES`] file in a fresh scratch directory.
    pub fn new() -> PreallocatedFile {
        let dir = crate::scratch_dir();
        let file = create_preallocated(&dir.path().join("preallocated.log"), PREALLOCATED_BYTES);
        PreallocatedFile {
            file,
            next_byte: AtomicU64::new(0),
            _dir: dir,
        }
    }
}

impl PreallocatedFile {
    /// Bytes written so far (wrapped writes included).
    pub fn written_bytes(&self) -> u64 {
        self.next_byte.load(Ordering::Relaxed)
    }
}

impl Default for PreallocatedFile {
    fn default() -> Self {
        PreallocatedFile::new()
    }
}

impl DurableLog for PreallocatedFile {
    type Writer<'a> = ();

    fn writer(&self) {}

    fn commit(&self, writer: &mut (), ticket: u64) {
        self.commit_rows(writer, ticket, &[&record(ticket)]);
    }
}

impl DurableRows for PreallocatedFile {
    /// The rows are written back to back with one `pwrite` and made durable by one `fdatasync`.
    fn commit_rows(&self, _: &mut (), _first_key: u64, rows: &[&[u8]]) {
        let bytes = rows.concat();
        let len = bytes.len() as u64;
        assert!(
            len > 0 && len <= PREALLOCATED_BYTES,
            "a record fits the file"
        );
        // 256-byte records divide the file, so they never take the wrap-to-zero branch; longer
        // ones that would cross the end start over at the beginning.
        let mut offset = self.next_byte.fetch_add(len, Ordering::Relaxed) % PREALLOCATED_BYTES;
        if offset + len > PREALLOCATED_BYTES {
            offset = 0;
        }
        assert!(offset + len <= PREALLOCATED_BYTES, "never grows the file");
        self.file
            .write_all_at(&bytes, offset)
            .expect("writing a record");
        self.file
            .sync_data()
            .expect("fdatasync of a preallocated record");
    }
}
