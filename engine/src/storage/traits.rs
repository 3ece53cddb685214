//! The `Storage` and `StorageFile` traits: what the engine needs from a disk.
//!
//! The contract is deliberately the POSIX durability model, spelled out so a
//! simulated disk can honour exactly it and no more:
//!
//! - `write_at` makes bytes visible to later reads, not durable;
//! - `sync_data` makes the file's written bytes *and its size* durable;
//! - creating, renaming or removing a directory entry is durable only after
//!   `sync_dir` on the parent directory.

use std::fmt::Debug;
use std::io;
use std::path::Path;

/// How [`Storage::open`] treats a file that does or does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the file; fail with `AlreadyExists` if it is there.
    CreateNew,
    /// Open an existing file; fail with `NotFound` if it is not there.
    Existing,
    /// Open the file, creating it empty if it is not there.
    OpenOrCreate,
}

/// A file opened for reading and writing at explicit offsets.
///
/// Implementations are shared between threads; positional I/O keeps them
/// free of a cursor.
#[expect(
    clippy::len_without_is_empty,
    reason = "a file's emptiness is never a question the engine asks"
)]
pub trait StorageFile: Send + Sync + Debug {
    /// Fills `buf` with the bytes at `offset`; fails with `UnexpectedEof` if
    /// the file ends before `buf` is full.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;

    /// Writes all of `data` at `offset`, extending the file if needed.
    /// Not durable until [`StorageFile::sync_data`] returns `Ok`.
    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;

    /// The file's current (volatile) length in bytes.
    fn len(&self) -> io::Result<u64>;

    /// Truncates or zero-extends the file to `len_bytes`.
    fn set_len(&self, len_bytes: u64) -> io::Result<()>;

    /// Makes every write and size change so far durable (`fdatasync`).
    ///
    /// After an error the state of unsynced pages is unknown: the kernel
    /// may have dropped them. Callers must treat the file as poisoned.
    fn sync_data(&self) -> io::Result<()>;
}

/// An exclusive lock on a database directory, released when dropped.
pub trait DirLock: Send + Sync + Debug {}

/// A file system: files plus the directory operations durability needs.
pub trait Storage: Send + Sync + Debug + 'static {
    /// Opens `path` according to `mode`.
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>>;

    /// Creates `dir` and any missing parents. Not durable until the parent
    /// directories are synced.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// The names (not paths) of the entries in `dir`, sorted bytewise so the
    /// engine never depends on directory order.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;

    /// Whether `path` names an existing file or directory.
    fn exists(&self, path: &Path) -> io::Result<bool>;

    /// Atomically replaces `to` with `from`. Durable after `sync_dir`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes the file at `path`. Durable after `sync_dir`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;

    /// Makes the directory's entries (creates, renames, removes) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// Takes an exclusive lock on `dir`; fails with `WouldBlock` if another
    /// holder (in this process or another) has it.
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>>;
}
