//! `FsStorage`: the real file system, through `std::fs`.
//!
//! This file and its siblings are the only code in actum that touches the
//! file system. Positional I/O (`FileExt`) keeps files shareable between
//! threads without a cursor or a lock.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use super::traits::{DirLock, OpenMode, Storage, StorageFile};

/// The name of the lock file inside a locked directory.
pub(crate) const LOCK_FILE_NAME: &str = "LOCK";

/// The operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsStorage;

impl FsStorage {
    /// The real file system.
    pub fn new() -> Self {
        FsStorage
    }
}

#[derive(Debug)]
struct FsFile {
    file: File,
}

impl StorageFile for FsFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.file.set_len(len_bytes)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// Holds the open lock file; the OS releases the lock when it is closed.
#[derive(Debug)]
struct FsDirLock {
    _file: File,
}

impl DirLock for FsDirLock {}

impl Storage for FsStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        match mode {
            OpenMode::CreateNew => options.create_new(true),
            OpenMode::Existing => &mut options,
            OpenMode::OpenOrCreate => options.create(true),
        };
        let file = options.open(path)?;
        Ok(Box::new(FsFile { file }))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            // A name that is not UTF-8 cannot be one of ours; skip it rather
            // than fail, so stray files never block an open.
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join(LOCK_FILE_NAME))?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(FsDirLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the directory is locked by another open database",
            )),
            Err(fs::TryLockError::Error(error)) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_on_a_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FsStorage::new();
        let first = storage.lock_dir(dir.path()).expect("first lock");
        let second = storage.lock_dir(dir.path());
        assert_eq!(
            second.expect_err("second lock must fail").kind(),
            io::ErrorKind::WouldBlock
        );
        drop(first);
        storage.lock_dir(dir.path()).expect("lock after release");
    }

    #[test]
    fn positional_io_round_trips_and_reports_short_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = FsStorage::new();
        let path = dir.path().join("f");
        let file = storage.open(&path, OpenMode::CreateNew).expect("create");
        file.write_at(4, b"abcd").expect("write");
        assert_eq!(file.len().expect("len"), 8);
        let mut buf = [0u8; 8];
        file.read_at(0, &mut buf).expect("read");
        assert_eq!(&buf, b"\0\0\0\0abcd");
        let mut past_end = [0u8; 2];
        let error = file.read_at(7, &mut past_end).expect_err("short read");
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        assert!(storage.open(&path, OpenMode::CreateNew).is_err());
        assert_eq!(storage.list_dir(dir.path()).expect("list"), vec!["f"]);
    }
}
