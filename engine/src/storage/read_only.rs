//! `ReadOnlyStorage`: another [`Storage`] seen through an in-memory,
//! copy-on-write overlay, so recovery and redb run as usual on a database
//! an operator only wants to read, and nothing reaches the disk.
//!
//! Reads pass through to the real files. Writes, size changes, creations,
//! renames and removals land in the overlay: a file written to keeps its
//! real bytes and holds the pages written since (4 KiB each, read from the
//! real file on first write), a created file lives only in memory, and a
//! removed or renamed-away path hides the real entry. Syncs do nothing,
//! since nothing here is durable. [`Storage::lock_dir`] takes the real
//! directory lock, so a directory another engine holds is still refused
//! (`WouldBlock`), and a read never runs beside a writer.
//!
//! **Invariant:** no call through this type writes, creates, renames or
//! removes anything in the wrapped storage, except that the real lock is
//! taken (an `flock` on the existing `LOCK` file, which changes no byte); a
//! directory without a `LOCK` file gets a lock of this process's own, so
//! none is created.

use std::collections::{BTreeMap, BTreeSet, btree_map};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::fs::LOCK_FILE_NAME;
use super::traits::{DirLock, OpenMode, Storage, StorageFile};

/// The overlay's unit of copy-on-write.
const PAGE_BYTES: u64 = 4096;

/// A [`Storage`] whose changes stay in memory (see the module docs).
pub struct ReadOnlyStorage {
    inner: Arc<dyn Storage>,
    names: Mutex<Names>,
}

/// What the overlay changed in the directory tree.
#[derive(Default)]
struct Names {
    /// Paths the overlay decides: a file it holds, or a removed entry.
    files: BTreeMap<PathBuf, Entry>,
    /// Directories made in memory only.
    dirs: BTreeSet<PathBuf>,
}

enum Entry {
    /// The path names no file any more (removed, or renamed away).
    Removed,
    /// The file at the path, shared by every handle opened on it.
    File(Arc<Mutex<Pages>>),
}

/// One file as the overlay sees it: the real file's bytes below
/// `base_visible_bytes`, the pages written since on top, zeros elsewhere.
struct Pages {
    /// The real file this one started from (`None` for a file created in
    /// memory).
    base: Option<Box<dyn StorageFile>>,
    /// How many bytes of `base` still show: a truncation hides the rest,
    /// even once the file grows again.
    base_visible_bytes: u64,
    /// The file's length.
    len_bytes: u64,
    /// Written pages by index, each `PAGE_BYTES` long; bytes past
    /// `len_bytes` in them are zero.
    pages: BTreeMap<u64, Box<[u8]>>,
}

impl ReadOnlyStorage {
    /// Wraps `inner`: reads reach it, nothing else does.
    pub fn new(inner: Arc<dyn Storage>) -> ReadOnlyStorage {
        ReadOnlyStorage {
            inner,
            names: Mutex::new(Names::default()),
        }
    }

    /// The paths whose contents or presence the overlay changed, in order:
    /// what the calls so far would have changed on the disk.
    pub fn changed_paths(&self) -> Vec<PathBuf> {
        let names = self.names();
        let mut changed: Vec<PathBuf> = names
            .files
            .iter()
            .filter(|(_, entry)| match entry {
                Entry::Removed => true,
                Entry::File(file) => lock(file).changed(),
            })
            .map(|(path, _)| path.clone())
            .collect();
        changed.extend(names.dirs.iter().cloned());
        changed.sort();
        changed
    }

    fn names(&self) -> MutexGuard<'_, Names> {
        // The overlay is plain data; a panic elsewhere leaves it whole.
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The overlay's file at `path`, made from the real file if the
    /// overlay does not hold it yet; `NotFound` if there is none.
    fn file_at(&self, names: &mut Names, path: &Path) -> io::Result<Arc<Mutex<Pages>>> {
        match names.files.get(path) {
            Some(Entry::File(file)) => return Ok(Arc::clone(file)),
            Some(Entry::Removed) => return Err(not_found(path)),
            None => {}
        }
        let base = self.inner.open(path, OpenMode::Existing)?;
        let file = Arc::new(Mutex::new(Pages::over(base)?));
        names
            .files
            .insert(path.to_path_buf(), Entry::File(Arc::clone(&file)));
        Ok(file)
    }

    /// Whether `path` exists as the overlay sees it.
    fn exists_in(&self, names: &Names, path: &Path) -> io::Result<bool> {
        match names.files.get(path) {
            Some(Entry::Removed) => Ok(false),
            Some(Entry::File(_)) => Ok(true),
            None if names.dirs.contains(path) => Ok(true),
            None => self.inner.exists(path),
        }
    }
}

impl fmt::Debug for ReadOnlyStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOnlyStorage")
            .field("inner", &self.inner)
            .field("changed", &self.changed_paths())
            .finish()
    }
}

fn lock(file: &Mutex<Pages>) -> MutexGuard<'_, Pages> {
    file.lock().unwrap_or_else(PoisonError::into_inner)
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "{} does not exist (removed in a read-only view)",
            path.display()
        ),
    )
}

fn page_index(offset: u64) -> u64 {
    offset / PAGE_BYTES
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).expect("a page offset fits in memory")
}

impl Pages {
    fn over(base: Box<dyn StorageFile>) -> io::Result<Pages> {
        let len_bytes = base.len()?;
        Ok(Pages {
            base: Some(base),
            base_visible_bytes: len_bytes,
            len_bytes,
            pages: BTreeMap::new(),
        })
    }

    fn created() -> Pages {
        Pages {
            base: None,
            base_visible_bytes: 0,
            len_bytes: 0,
            pages: BTreeMap::new(),
        }
    }

    /// True if the file differs from the real one it started from.
    fn changed(&self) -> bool {
        match &self.base {
            None => true,
            Some(base) => {
                !self.pages.is_empty()
                    || self.base_visible_bytes != self.len_bytes
                    || !base.len().is_ok_and(|real| real == self.len_bytes)
            }
        }
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&end| end <= self.len_bytes)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "read of {} bytes at {offset} runs past the end ({} bytes)",
                        buf.len(),
                        self.len_bytes
                    ),
                )
            })?;
        if buf.is_empty() {
            return Ok(());
        }
        // One read of the real bytes that still show, then zeros, then the
        // written pages on top.
        let from_base = self.base_visible_bytes.clamp(offset, end) - offset;
        let (real, rest) = buf.split_at_mut(to_usize(from_base));
        if let Some(base) = self.base.as_ref().filter(|_| !real.is_empty()) {
            base.read_at(offset, real)?;
        }
        rest.fill(0);
        for (&index, page) in self.pages.range(page_index(offset)..=page_index(end - 1)) {
            let page_at = index * PAGE_BYTES;
            let lo = page_at.max(offset);
            let hi = (page_at + PAGE_BYTES).min(end);
            if lo >= hi {
                continue;
            }
            let dst = &mut buf[to_usize(lo - offset)..to_usize(hi - offset)];
            dst.copy_from_slice(&page[to_usize(lo - page_at)..to_usize(hi - page_at)]);
        }
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write past u64"))?;
        let mut at = offset;
        // Bounded by the pages the write covers.
        while at < end {
            let index = page_index(at);
            let page_at = index * PAGE_BYTES;
            let hi = (page_at + PAGE_BYTES).min(end);
            let src = &data[to_usize(at - offset)..to_usize(hi - offset)];
            // Zeros written where only zeros show need no page.
            let implicit_zeros = page_at >= self.base_visible_bytes
                && !self.pages.contains_key(&index)
                && src.iter().all(|&b| b == 0);
            if !implicit_zeros {
                let page = self.page_mut(index)?;
                page[to_usize(at - page_at)..to_usize(hi - page_at)].copy_from_slice(src);
            }
            at = hi;
        }
        self.len_bytes = self.len_bytes.max(end);
        Ok(())
    }

    /// The page at `index`, copied from what shows there on first use.
    fn page_mut(&mut self, index: u64) -> io::Result<&mut [u8]> {
        let page_at = index * PAGE_BYTES;
        match self.pages.entry(index) {
            btree_map::Entry::Occupied(slot) => Ok(slot.into_mut()),
            btree_map::Entry::Vacant(slot) => {
                let mut page = vec![0u8; PAGE_BYTES as usize].into_boxed_slice();
                let shown = self.base_visible_bytes.clamp(page_at, page_at + PAGE_BYTES) - page_at;
                if let Some(base) = self.base.as_ref().filter(|_| shown > 0) {
                    base.read_at(page_at, &mut page[..to_usize(shown)])?;
                }
                Ok(slot.insert(page))
            }
        }
    }

    fn set_len(&mut self, len_bytes: u64) {
        if len_bytes < self.len_bytes {
            // Bytes past the new end must read as zeros if it grows again.
            let cut = page_index(len_bytes);
            let _dropped = self.pages.split_off(&(cut + 1));
            if let Some(page) = self.pages.get_mut(&cut) {
                page[to_usize(len_bytes - cut * PAGE_BYTES)..].fill(0);
            }
            self.base_visible_bytes = self.base_visible_bytes.min(len_bytes);
        }
        self.len_bytes = len_bytes;
        assert!(self.base_visible_bytes <= self.len_bytes);
    }
}

/// A handle on an overlay file; every handle on one path shares it.
struct Handle {
    path: PathBuf,
    file: Arc<Mutex<Pages>>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadOnlyHandle")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl StorageFile for Handle {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        lock(&self.file).read_at(offset, buf)
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        lock(&self.file).write_at(offset, data)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(lock(&self.file).len_bytes)
    }

    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        lock(&self.file).set_len(len_bytes);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        // Nothing in the overlay is ever durable; there is nothing to do.
        Ok(())
    }
}

/// The lock of a directory that has no `LOCK` file: no other process can
/// hold one on it, and creating the file would change the directory.
#[derive(Debug)]
struct LocalLock;

impl DirLock for LocalLock {}

impl Storage for ReadOnlyStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let mut names = self.names();
        let exists = self.exists_in(&names, path)?;
        let file = match (mode, exists) {
            (OpenMode::CreateNew, true) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!("{} already exists", path.display()),
                ));
            }
            (OpenMode::Existing, false) => return Err(not_found(path)),
            (_, true) => self.file_at(&mut names, path)?,
            (_, false) => {
                let parent = path.parent().unwrap_or(Path::new("."));
                if !parent.as_os_str().is_empty() && !self.exists_in(&names, parent)? {
                    return Err(not_found(parent));
                }
                let file = Arc::new(Mutex::new(Pages::created()));
                names
                    .files
                    .insert(path.to_path_buf(), Entry::File(Arc::clone(&file)));
                file
            }
        };
        Ok(Box::new(Handle {
            path: path.to_path_buf(),
            file,
        }))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut names = self.names();
        // Bounded by the path's depth.
        for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            if self.exists_in(&names, ancestor)? {
                break;
            }
            names.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let names = self.names();
        let mut listed: BTreeSet<String> = if names.dirs.contains(dir) {
            BTreeSet::new()
        } else {
            self.inner.list_dir(dir)?.into_iter().collect()
        };
        for (path, entry) in &names.files {
            let Some(name) = path
                .parent()
                .filter(|parent| *parent == dir)
                .and_then(|_| path.file_name())
                .and_then(|name| name.to_str())
            else {
                continue;
            };
            match entry {
                Entry::Removed => listed.remove(name),
                Entry::File(_) => listed.insert(name.to_string()),
            };
        }
        for made in &names.dirs {
            if made.parent() == Some(dir)
                && let Some(name) = made.file_name().and_then(|n| n.to_str())
            {
                listed.insert(name.to_string());
            }
        }
        // A BTreeSet iterates in bytewise order, as the trait asks.
        Ok(listed.into_iter().collect())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        let names = self.names();
        self.exists_in(&names, path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut names = self.names();
        let file = self.file_at(&mut names, from)?;
        names.files.insert(from.to_path_buf(), Entry::Removed);
        names.files.insert(to.to_path_buf(), Entry::File(file));
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut names = self.names();
        if !self.exists_in(&names, path)? {
            return Err(not_found(path));
        }
        names.files.insert(path.to_path_buf(), Entry::Removed);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let names = self.names();
        if self.exists_in(&names, dir)? {
            Ok(())
        } else {
            Err(not_found(dir))
        }
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        // Only a `LOCK` file on the real disk can be held by another
        // process; taking the real lock on it changes no byte.
        if self.inner.exists(&dir.join(LOCK_FILE_NAME))? {
            self.inner.lock_dir(dir)
        } else {
            Ok(Box::new(LocalLock))
        }
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::storage::{FsStorage, RedbBackend};
    use redb::ReadableDatabase;

    /// Every file under `dir` (relative path, bytes), in order.
    fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(at) = stack.pop() {
            for entry in std::fs::read_dir(&at).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path.strip_prefix(dir).unwrap().to_path_buf();
                    out.push((rel, std::fs::read(&path).unwrap()));
                }
            }
        }
        out.sort();
        out
    }

    fn setup() -> (tempfile::TempDir, ReadOnlyStorage) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), vec![7u8; 10_000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub").join("b"), b"bee").unwrap();
        let storage = ReadOnlyStorage::new(Arc::new(FsStorage::new()));
        (dir, storage)
    }

    #[test]
    fn every_change_is_seen_through_the_view_and_none_reaches_the_disk() {
        let (dir, ro) = setup();
        let before = tree(dir.path());
        let a = dir.path().join("a");
        let file = ro.open(&a, OpenMode::Existing).unwrap();
        file.write_at(5_000, b"hello").unwrap();
        file.write_at(12_000, b"tail").unwrap();
        file.sync_data().unwrap();
        let made = ro
            .open(&dir.path().join("new"), OpenMode::CreateNew)
            .unwrap();
        made.write_at(0, b"fresh").unwrap();
        ro.rename(&dir.path().join("new"), &dir.path().join("renamed"))
            .unwrap();
        ro.remove_file(&dir.path().join("sub").join("b")).unwrap();
        ro.create_dir_all(&dir.path().join("x").join("y")).unwrap();
        ro.sync_dir(dir.path()).unwrap();

        let mut buf = vec![0u8; 12_004];
        ro.open(&a, OpenMode::Existing)
            .unwrap()
            .read_at(0, &mut buf)
            .unwrap();
        assert_eq!(&buf[4_999..5_006], b"\x07hello\x07");
        assert!(buf[10_000..12_000].iter().all(|&b| b == 0));
        assert_eq!(&buf[12_000..], b"tail");
        assert_eq!(
            ro.list_dir(dir.path()).unwrap(),
            ["a", "renamed", "sub", "x"]
        );
        assert!(ro.list_dir(&dir.path().join("sub")).unwrap().is_empty());
        assert!(!ro.exists(&dir.path().join("new")).unwrap());
        assert!(ro.exists(&dir.path().join("x").join("y")).unwrap());
        let mut fresh = [0u8; 5];
        ro.open(&dir.path().join("renamed"), OpenMode::Existing)
            .unwrap()
            .read_at(0, &mut fresh)
            .unwrap();
        assert_eq!(&fresh, b"fresh");
        assert_eq!(tree(dir.path()), before, "the disk is untouched");
        assert!(!dir.path().join("x").exists());
        let changed = ro.changed_paths();
        assert_eq!(changed.len(), 6, "{changed:?}");
    }

    #[test]
    fn a_truncation_hides_the_real_bytes_even_after_the_file_grows_again() {
        let (dir, ro) = setup();
        let file = ro.open(&dir.path().join("a"), OpenMode::Existing).unwrap();
        file.write_at(4_100, b"xy").unwrap();
        file.set_len(4_101).unwrap();
        file.set_len(9_000).unwrap();
        assert_eq!(file.len().unwrap(), 9_000);
        let mut buf = vec![1u8; 9_000];
        file.read_at(0, &mut buf).unwrap();
        assert!(buf[..4_100].iter().all(|&b| b == 7));
        assert_eq!(buf[4_100], b'x');
        assert!(buf[4_101..].iter().all(|&b| b == 0), "no stale byte shows");
        let mut past = [0u8; 2];
        let error = file.read_at(8_999, &mut past).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(
            std::fs::read(dir.path().join("a")).unwrap(),
            vec![7u8; 10_000]
        );
    }

    #[test]
    fn handles_on_one_path_share_its_bytes_across_renames_and_removals() {
        let (dir, ro) = setup();
        let b = dir.path().join("sub").join("b");
        let first = ro.open(&b, OpenMode::Existing).unwrap();
        let second = ro.open(&b, OpenMode::OpenOrCreate).unwrap();
        first.write_at(1, b"EE").unwrap();
        let mut buf = [0u8; 3];
        second.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"bEE");
        ro.rename(&b, &dir.path().join("c")).unwrap();
        ro.remove_file(&dir.path().join("c")).unwrap();
        second.write_at(3, b"!").unwrap();
        let mut all = [0u8; 4];
        first.read_at(0, &mut all).unwrap();
        assert_eq!(&all, b"bEE!", "an open handle outlives its name");
        assert_eq!(
            ro.open(&b, OpenMode::Existing).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert_eq!(
            ro.open(&dir.path().join("a"), OpenMode::CreateNew)
                .unwrap_err()
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(std::fs::read(&b).unwrap(), b"bee");
    }

    #[test]
    fn the_real_lock_is_taken_and_a_missing_lock_file_is_not_created() {
        let (dir, ro) = setup();
        let _local = ro.lock_dir(dir.path()).unwrap();
        assert!(!dir.path().join(LOCK_FILE_NAME).exists());
        let real = FsStorage::new().lock_dir(dir.path()).unwrap();
        let refused = ro.lock_dir(dir.path()).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::WouldBlock);
        drop(real);
        let _held = ro.lock_dir(dir.path()).unwrap();
        assert_eq!(
            FsStorage::new().lock_dir(dir.path()).unwrap_err().kind(),
            io::ErrorKind::WouldBlock,
            "the view holds the real lock"
        );
    }

    #[test]
    fn redb_commits_through_the_view_and_the_file_on_disk_stays_as_it_was() {
        const TABLE: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("t");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        {
            let db = redb::Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(TABLE)
                .unwrap()
                .insert(1, b"one".as_slice())
                .unwrap();
            txn.commit().unwrap();
        }
        let before = std::fs::read(&path).unwrap();
        let ro = ReadOnlyStorage::new(Arc::new(FsStorage::new()));
        let file = ro.open(&path, OpenMode::Existing).unwrap();
        let db = redb::Database::builder()
            .create_with_backend(RedbBackend::new(file))
            .unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(TABLE)
            .unwrap()
            .insert(2, b"two".as_slice())
            .unwrap();
        txn.commit().unwrap();
        let read = db.begin_read().unwrap();
        let table = read.open_table(TABLE).unwrap();
        assert_eq!(table.get(1).unwrap().unwrap().value(), b"one");
        assert_eq!(table.get(2).unwrap().unwrap().value(), b"two");
        drop((table, read, db));
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }
}
