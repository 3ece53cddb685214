//! `FrozenStorage`: a few files copied into memory, read-only, for a
//! snapshot of a database another engine keeps writing
//! (`Engine::open_snapshot`). Wrapped in a [`super::ReadOnlyStorage`], it
//! is a directory an open can recover and redb can commit to, in memory,
//! while the real files go on changing under the writer.
//!
//! Files are kept in chunks; a chunk of zeros (the unused end of a
//! preallocated WAL segment) takes no memory.
//!
//! **Invariant:** it holds only what it was given: every call that would
//! change it fails (`PermissionDenied`), and its lock is a lock of its own,
//! so nothing reaches the real directory through it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::traits::{DirLock, OpenMode, Storage, StorageFile};

/// The unit a frozen file is kept in.
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;

/// A chunk of zeros, to compare with.
static ZEROS: [u8; CHUNK_BYTES] = [0; CHUNK_BYTES];

/// A file's bytes, in chunks of `CHUNK_BYTES` (`None`: all zeros).
#[derive(Default)]
pub(crate) struct FrozenFile {
    len_bytes: u64,
    chunks: Vec<Option<Box<[u8]>>>,
}

impl FrozenFile {
    /// An empty file of `len_bytes` zeros, to be filled by [`Self::put`].
    pub(crate) fn zeros(len_bytes: u64) -> FrozenFile {
        let count = usize::try_from(len_bytes.div_ceil(CHUNK_BYTES as u64))
            .expect("a file that fits in memory");
        FrozenFile {
            len_bytes,
            chunks: (0..count).map(|_| None).collect(),
        }
    }

    /// How many chunks the file has.
    pub(crate) fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// The byte range of chunk `index`.
    pub(crate) fn chunk_range(&self, index: usize) -> (u64, usize) {
        let at = index as u64 * CHUNK_BYTES as u64;
        let len = (self.len_bytes - at).min(CHUNK_BYTES as u64);
        (at, len as usize)
    }

    /// Sets chunk `index` to `bytes` (its whole range).
    pub(crate) fn put(&mut self, index: usize, bytes: &[u8]) {
        assert_eq!(bytes.len(), self.chunk_range(index).1, "a whole chunk");
        // A slice comparison (memcmp), fast even in a debug build.
        self.chunks[index] = if bytes == &ZEROS[..bytes.len()] {
            None
        } else {
            Some(bytes.into())
        };
    }

    /// The first `n` bytes (fewer if the file is shorter).
    pub(crate) fn prefix(&self, n: usize) -> Vec<u8> {
        let n = n.min(usize::try_from(self.len_bytes).unwrap_or(usize::MAX));
        let mut out = vec![0u8; n];
        self.read(0, &mut out);
        out
    }

    fn read(&self, offset: u64, buf: &mut [u8]) {
        let mut done = 0usize;
        // Bounded by the chunks `buf` covers.
        while done < buf.len() {
            let at = offset + done as u64;
            let index = (at / CHUNK_BYTES as u64) as usize;
            let within = (at % CHUNK_BYTES as u64) as usize;
            let take = (CHUNK_BYTES - within).min(buf.len() - done);
            match &self.chunks[index] {
                Some(chunk) => {
                    buf[done..done + take].copy_from_slice(&chunk[within..within + take]);
                }
                None => buf[done..done + take].fill(0),
            }
            done += take;
        }
    }
}

/// Files and directories held in memory (see the module docs).
#[derive(Default)]
pub(crate) struct FrozenStorage {
    files: BTreeMap<PathBuf, Arc<FrozenFile>>,
    dirs: BTreeSet<PathBuf>,
}

impl fmt::Debug for FrozenStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenStorage")
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl FrozenStorage {
    /// Adds directory `dir` (and its ancestors).
    pub(crate) fn add_dir(&mut self, dir: &Path) {
        for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            self.dirs.insert(ancestor.to_path_buf());
        }
    }

    /// Adds the file `path` with `file`'s bytes.
    pub(crate) fn add_file(&mut self, path: &Path, file: FrozenFile) {
        if let Some(parent) = path.parent() {
            self.add_dir(parent);
        }
        self.files.insert(path.to_path_buf(), Arc::new(file));
    }
}

fn frozen(what: &str, path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{what} {}: a snapshot's copy does not change",
            path.display()
        ),
    )
}

/// A handle on a frozen file.
struct Handle {
    path: PathBuf,
    file: Arc<FrozenFile>,
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FrozenHandle")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl StorageFile for Handle {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64);
        if end.is_none_or(|end| end > self.file.len_bytes) {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "read of {} bytes at {offset} past the end ({}) of {}",
                    buf.len(),
                    self.file.len_bytes,
                    self.path.display()
                ),
            ));
        }
        self.file.read(offset, buf);
        Ok(())
    }

    fn write_at(&self, _offset: u64, _data: &[u8]) -> io::Result<()> {
        Err(frozen("write to", &self.path))
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.len_bytes)
    }

    fn set_len(&self, _len_bytes: u64) -> io::Result<()> {
        Err(frozen("resize", &self.path))
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
}

/// The lock of a frozen directory: nobody else can see it.
#[derive(Debug)]
struct OwnLock;

impl DirLock for OwnLock {}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} is not in the snapshot", path.display()),
    )
}

impl Storage for FrozenStorage {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        match (self.files.get(path), mode) {
            (Some(_), OpenMode::CreateNew) => Err(frozen("create", path)),
            (Some(file), _) => Ok(Box::new(Handle {
                path: path.to_path_buf(),
                file: Arc::clone(file),
            })),
            (None, OpenMode::Existing) => Err(not_found(path)),
            (None, _) => Err(frozen("create", path)),
        }
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        if self.dirs.contains(dir) {
            Ok(())
        } else {
            Err(frozen("create directory", dir))
        }
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        if !self.dirs.contains(dir) {
            return Err(not_found(dir));
        }
        let children = self
            .files
            .keys()
            .chain(self.dirs.iter())
            .filter(|path| path.parent() == Some(dir))
            .filter_map(|path| path.file_name()?.to_str().map(str::to_string));
        // A BTreeSet iterates in bytewise order, as the trait asks.
        let names: BTreeSet<String> = children.collect();
        Ok(names.into_iter().collect())
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(self.files.contains_key(path) || self.dirs.contains(path))
    }

    fn rename(&self, from: &Path, _to: &Path) -> io::Result<()> {
        Err(frozen("rename", from))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        Err(frozen("remove", path))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        if self.dirs.contains(dir) {
            Ok(())
        } else {
            Err(not_found(dir))
        }
    }

    fn lock_dir(&self, _dir: &Path) -> io::Result<Box<dyn DirLock>> {
        Ok(Box::new(OwnLock))
    }
}
