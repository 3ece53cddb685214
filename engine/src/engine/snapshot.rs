//! A read-only engine over a database another engine has open and keeps
//! committing to ([`Engine::open_snapshot`]): one consistent state, as of
//! an LSN it reports, with no lock taken and no byte changed.
//!
//! How (docs/DURABILITY.md, "Reading a live database"):
//!
//! 1. Read both manifest copies, raw, and choose the current one (the
//!    state file it names, the oldest live segment).
//! 2. Copy the state store into memory between two reads of redb's header:
//!    the copy's own header and both reads must agree. A redb commit never
//!    writes a page the current commit reaches, and publishes a new one
//!    only by rewriting the header, so an unchanged header proves every
//!    page the copy needs was stable while it was read.
//! 3. Copy every WAL segment from the oldest live one, the newest segment
//!    first and each file from its end backwards: what a later part shows
//!    was written before the earlier part was read, so the copy is a
//!    prefix of the log as a crash could have left it, never a log with a
//!    hole the writer had already filled.
//!    The oldest segment listed must be the manifest's oldest live one.
//! 4. Read each segment's header again through the handle it was copied
//!    through: a segment recycled meanwhile has a new header, written
//!    before any record of its new life; one removed is still read whole
//!    through its open handle.
//! 5. `fsync` each segment read (through a handle of this reader; no byte
//!    changes): everything copied is now durable, so the LSN recovery of
//!    the copy ends at is one no crash can take back.
//! 6. Recover the copy, in memory, as `open_read_only` does.
//!
//! Anything that changed (redb's header, a segment's header, a file gone
//! or shorter, the manifest's oldest segment gone),
//! or a recovery of the copy that fails, throws the copy away and takes it
//! again, at most [`SNAPSHOT_ATTEMPTS`] times; then `SnapshotUnstable`
//! naming the directory (or the failed recovery's own error).
//!
//! **Invariant:** a snapshot writes, creates, renames, removes and locks
//! nothing in the directory; it reads, and syncs the segments it read.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::clock::{Clock, SystemClock};
use crate::db::{MANIFEST_FILES, STATE_FILE, WAL_DIR};
use crate::error::{Error, Result};
use crate::ids::{Lsn, SegmentId};
use crate::manifest;
use crate::storage::frozen::{FrozenFile, FrozenStorage};
use crate::storage::{FsStorage, OpenMode, ReadOnlyStorage, Storage, StorageFile};
use crate::wal::format::{SEGMENT_HEADER_BYTES, parse_segment_file_name};

use super::core::{Access, Engine};
use super::existing::{read_only_options, require_database};
use super::options::EngineOptions;

/// How many copies a snapshot takes before it gives up on a directory
/// that changes under every one of them.
pub const SNAPSHOT_ATTEMPTS: u32 = 8;

/// redb's header (magic, god byte, geometry, both commit slots): every
/// commit that publishes rewrites it (redb 4.5, `DB_HEADER_SIZE`).
const REDB_HEADER_BYTES: usize = 320;

/// Why a copy was thrown away.
type Changed = String;

/// A file's copy, and the handle it was read through.
type Copied = (FrozenFile, Box<dyn StorageFile>);

impl Engine {
    /// Opens a snapshot of the database in `dir`, which another engine
    /// (in another process, or this one) may have open and be committing
    /// to: a read-only engine holding one consistent state, as of
    /// [`Engine::snapshot_lsn`]. No lock is taken and no byte of `dir`
    /// changes; the writer is not waited for.
    ///
    /// The snapshot copies the state store and the live WAL segments into
    /// memory (so it costs their size; the unused, zeroed end of a
    /// segment costs nothing), checks that no checkpoint moved anything
    /// while it read, syncs the segments it read, and recovers the copy as
    /// [`Engine::open_read_only`] does. A copy that a checkpoint, a
    /// segment's removal or recycling changed under it is taken again, up
    /// to [`SNAPSHOT_ATTEMPTS`] times; then [`Error::SnapshotUnstable`]
    /// names the directory. Commands land in memory and are gone with the
    /// engine, as on a read-only open.
    ///
    /// ```
    /// use actum::books::{CreateRun, RunId, digest_of};
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let writer = Engine::open(dir.path(), EngineOptions::default())?;
    /// writer.create_run(CreateRun { run: RunId::new("live")?, input_digest: digest_of(b"1"),
    ///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// // The directory is locked by the writer, and still readable.
    /// assert!(matches!(Engine::open_read_only(dir.path(), EngineOptions::default()),
    ///     Err(actum::Error::Locked { .. })));
    /// let snapshot = Engine::open_snapshot(dir.path(), EngineOptions::default())?;
    /// assert_eq!(snapshot.snapshot_lsn(), Some(writer.durable_lsn()));
    /// assert!(snapshot.run(&RunId::new("live")?)?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_snapshot(dir: impl AsRef<Path>, options: EngineOptions) -> Result<Engine> {
        let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
        Engine::open_snapshot_with(storage, Arc::new(SystemClock), dir, options)
    }

    /// [`Engine::open_snapshot`] on `storage` with `clock` (the simulator
    /// passes its disk and virtual clock).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use actum::engine::{Engine, EngineOptions};
    /// use actum::{FsStorage, Lsn, ManualClock};
    ///
    /// let dir = tempfile::tempdir()?;
    /// Engine::open(dir.path(), EngineOptions::default())?.close()?;
    /// let snapshot = Engine::open_snapshot_with(Arc::new(FsStorage::new()),
    ///     Arc::new(ManualClock::new(0)), dir.path(), EngineOptions::default())?;
    /// assert_eq!(snapshot.snapshot_lsn(), Some(Lsn(0)), "an empty log");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_snapshot_with(
        storage: Arc<dyn Storage>,
        clock: Arc<dyn Clock>,
        dir: impl AsRef<Path>,
        options: EngineOptions,
    ) -> Result<Engine> {
        let dir = dir.as_ref();
        options.validate()?;
        let options = read_only_options(options);
        let mut engine = with_copy(storage.as_ref(), dir, |copy, _last| {
            let view: Arc<dyn Storage> = Arc::new(ReadOnlyStorage::new(Arc::new(copy)));
            Engine::open_for(
                view,
                Arc::clone(&clock),
                dir,
                options.clone(),
                Access::ReadOnly,
            )
        })?;
        engine.snapshot_lsn = Some(engine.recovery.durable_lsn);
        Ok(engine)
    }

    /// The LSN a snapshot ([`Engine::open_snapshot`]) is as of: its books
    /// hold the effects of exactly the records up to it, and every one of
    /// them is durable. `None` for an engine opened any other way.
    ///
    /// ```
    /// use actum::engine::{Engine, EngineOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// assert_eq!(engine.snapshot_lsn(), None, "not a snapshot");
    /// let snapshot = Engine::open_snapshot(dir.path(), EngineOptions::default())?;
    /// assert_eq!(snapshot.snapshot_lsn(), Some(engine.durable_lsn()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot_lsn(&self) -> Option<Lsn> {
        self.snapshot_lsn
    }
}

/// Takes a stable copy of `dir` and hands it to `use_copy` (with whether
/// this is the last attempt), again with a fresh copy while a copy is
/// unstable or `use_copy` fails, at most [`SNAPSHOT_ATTEMPTS`] times. A
/// copy read while the writer wrote can look torn in a way no crash
/// leaves, and a fresh copy tells; damage that is really there fails every
/// attempt, and the last attempt's error is returned.
pub(crate) fn with_copy<T>(
    storage: &dyn Storage,
    dir: &Path,
    mut use_copy: impl FnMut(FrozenStorage, bool) -> Result<T>,
) -> Result<T> {
    let mut changed = String::new();
    // Bounded by SNAPSHOT_ATTEMPTS.
    for attempt in 1..=SNAPSHOT_ATTEMPTS {
        require_database(storage, dir)?;
        let last = attempt == SNAPSHOT_ATTEMPTS;
        match take(storage, dir)? {
            Ok(copy) => match use_copy(copy, last) {
                Ok(done) => return Ok(done),
                Err(error) if last => return Err(error),
                Err(error) => changed = format!("reading the copy failed: {error}"),
            },
            Err(why) => changed = why,
        }
        std::thread::yield_now();
    }
    Err(Error::SnapshotUnstable {
        dir: dir.to_path_buf(),
        attempts: u64::from(SNAPSHOT_ATTEMPTS),
        changed,
    })
}

/// One attempt: the copy, or why it was thrown away (`Ok(Err(..))`).
fn take(storage: &dyn Storage, dir: &Path) -> Result<std::result::Result<FrozenStorage, Changed>> {
    let manifests = read_manifests(storage, dir)?;
    let current = manifests
        .iter()
        .flatten()
        .filter_map(|bytes| manifest::decode(bytes).ok())
        .max_by_key(|m| m.sequence);
    let state_file = current
        .as_ref()
        .map_or(STATE_FILE.to_string(), |m| m.state_file.clone());
    let first_live = current
        .as_ref()
        .map_or(SegmentId(0), |m| m.first_live_segment);
    let mut copy = FrozenStorage::default();
    copy.add_dir(dir);

    let state_path = dir.join(&state_file);
    if exists(storage, &state_path)? {
        let before = match header(storage, &state_path)? {
            Ok(header) => header,
            Err(why) => return Ok(Err(why)),
        };
        let (file, _) = match copy_file(storage, &state_path)? {
            Ok(copied) => copied,
            Err(why) => return Ok(Err(why)),
        };
        let after = match header(storage, &state_path)? {
            Ok(header) => header,
            Err(why) => return Ok(Err(why)),
        };
        if file.prefix(REDB_HEADER_BYTES) != before || after != before {
            return Ok(Err(format!(
                "the state store {} committed while it was copied",
                state_path.display()
            )));
        }
        copy.add_file(&state_path, file);
    }

    let wal = dir.join(WAL_DIR);
    let mut segments: Vec<(SegmentId, String)> = if exists(storage, &wal)? {
        storage
            .list_dir(&wal)
            .map_err(|e| Error::io("list WAL directory for a snapshot", &wal, e))?
            .into_iter()
            .filter_map(|name| Some((parse_segment_file_name(&name)?, name)))
            .filter(|(id, _)| *id >= first_live)
            .collect()
    } else {
        Vec::new()
    };
    copy.add_dir(&wal);
    segments.sort();
    if current.is_some() && segments.first().is_some_and(|(id, _)| *id != first_live) {
        return Ok(Err(format!(
            "segment {} of {} was removed after the manifest naming it was read",
            first_live.0,
            wal.display()
        )));
    }
    if segments
        .windows(2)
        .any(|pair| pair[0].0.next() != pair[1].0)
    {
        return Ok(Err(format!(
            "a segment of {} was removed or recycled while it was listed",
            wal.display()
        )));
    }
    let mut read = Vec::new();
    // Newest first (see the module docs); bounded by the listing.
    for (_, name) in segments.iter().rev() {
        let path = wal.join(name);
        match copy_file(storage, &path)? {
            Ok((file, handle)) => {
                let header = file.prefix(SEGMENT_HEADER_BYTES as usize);
                copy.add_file(&path, file);
                read.push((path, handle, header));
            }
            Err(why) => return Ok(Err(why)),
        }
    }
    // A segment recycled while it was copied has a new header (written
    // before any record of its new life); one removed is still read whole
    // through the handle it was copied through.
    for (path, handle, header) in &read {
        let mut now = vec![0u8; header.len()];
        if let Err(e) = handle.read_at(0, &mut now) {
            return changed_or("read WAL segment header for a snapshot", path, e).map(Err);
        }
        if &now != header {
            return Ok(Err(format!(
                "{} was recycled while it was copied",
                path.display()
            )));
        }
    }
    // What was read is durable once this returns: a record the writer has
    // written but not yet synced is synced here (it changes no byte).
    for (path, handle, _) in &read {
        handle
            .sync_data()
            .map_err(|e| Error::io("sync WAL segment read by a snapshot", path, e))?;
    }

    for (name, bytes) in MANIFEST_FILES.iter().zip(manifests) {
        if let Some(bytes) = bytes {
            let mut file = FrozenFile::zeros(bytes.len() as u64);
            // Bounded by the copy's chunks (one, for a 512-byte slot).
            for index in 0..file.chunk_count() {
                let (at, len) = file.chunk_range(index);
                let at = usize::try_from(at).expect("a slot in memory");
                file.put(index, &bytes[at..at + len]);
            }
            copy.add_file(&dir.join(name), file);
        }
    }
    Ok(Ok(copy))
}

fn exists(storage: &dyn Storage, path: &Path) -> Result<bool> {
    storage
        .exists(path)
        .map_err(|e| Error::io("look for a file for a snapshot", path, e))
}

/// Both manifest copies' bytes, `None` for a missing one.
fn read_manifests(storage: &dyn Storage, dir: &Path) -> Result<[Option<Vec<u8>>; 2]> {
    let mut out = [None, None];
    for (slot, name) in out.iter_mut().zip(MANIFEST_FILES) {
        let path = dir.join(name);
        let file = match storage.open(&path, OpenMode::Existing) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("open manifest copy for a snapshot", &path, e)),
        };
        let read = file.len().and_then(|len| {
            let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
            file.read_at(0, &mut bytes).map(|()| bytes)
        });
        *slot = Some(read.map_err(|e| Error::io("read manifest copy for a snapshot", &path, e))?);
    }
    Ok(out)
}

/// An I/O error that means the file changed under the copy (removed,
/// shorter), or a real error.
fn changed_or(op: &'static str, path: &Path, e: io::Error) -> Result<Changed> {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::UnexpectedEof => Ok(format!(
            "{} was removed or shortened while it was copied ({e})",
            path.display()
        )),
        _ => Err(Error::io(op, path, e)),
    }
}

/// The first `REDB_HEADER_BYTES` of `path` (fewer if it is shorter).
fn header(storage: &dyn Storage, path: &Path) -> Result<std::result::Result<Vec<u8>, Changed>> {
    let read = storage.open(path, OpenMode::Existing).and_then(|file| {
        let len = file.len()?;
        let mut bytes = vec![
            0u8;
            usize::try_from(len)
                .unwrap_or(usize::MAX)
                .min(REDB_HEADER_BYTES)
        ];
        file.read_at(0, &mut bytes).map(|()| bytes)
    });
    match read {
        Ok(bytes) => Ok(Ok(bytes)),
        Err(e) => changed_or("read state store header for a snapshot", path, e).map(Err),
    }
}

/// `path`'s bytes, read chunk by chunk from the end backwards, and the
/// handle they were read through.
fn copy_file(storage: &dyn Storage, path: &Path) -> Result<std::result::Result<Copied, Changed>> {
    let read = || -> io::Result<Copied> {
        let handle = storage.open(path, OpenMode::Existing)?;
        let mut file = FrozenFile::zeros(handle.len()?);
        let mut buf = Vec::new();
        // Bounded by the file's chunks.
        for index in (0..file.chunk_count()).rev() {
            let (at, len) = file.chunk_range(index);
            buf.resize(len, 0);
            handle.read_at(at, &mut buf)?;
            file.put(index, &buf);
        }
        Ok((file, handle))
    };
    match read() {
        Ok(copied) => Ok(Ok(copied)),
        Err(e) => changed_or("copy a file for a snapshot", path, e).map(Err),
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;

    #[test]
    fn the_header_compared_is_redbs_whole_header() {
        // Two 128-byte commit slots after 64 bytes of magic and geometry.
        assert_eq!(REDB_HEADER_BYTES, 64 + 2 * 128);
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        let storage = FsStorage::new();
        let state = dir.path().join(STATE_FILE);
        let before = header(&storage, &state).unwrap().unwrap();
        engine
            .create_run(crate::books::CreateRun {
                run: crate::books::RunId::new("r").unwrap(),
                input_digest: crate::books::digest_of(b"r"),
                agent_version: "1".into(),
                trace_id: "t".into(),
                parent: None,
                input: None,
            })
            .unwrap();
        engine.checkpoint().unwrap();
        let after = header(&storage, &state).unwrap().unwrap();
        assert_ne!(before, after, "a commit rewrites the header compared");
    }

    /// A storage whose state store header reads differently at the end of
    /// each of the first `unstable` copies than at their start, as if a
    /// checkpoint committed meanwhile.
    #[derive(Debug)]
    struct Shifting {
        inner: FsStorage,
        reads: std::sync::atomic::AtomicU32,
        unstable: u32,
    }

    #[derive(Debug)]
    struct Flipped(Box<dyn StorageFile>);

    impl StorageFile for Flipped {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            self.0.read_at(offset, buf)?;
            if offset == 0 && !buf.is_empty() {
                buf[0] ^= 0xff;
            }
            Ok(())
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
            self.0.write_at(offset, data)
        }
        fn len(&self) -> io::Result<u64> {
            self.0.len()
        }
        fn set_len(&self, len_bytes: u64) -> io::Result<()> {
            self.0.set_len(len_bytes)
        }
        fn sync_data(&self) -> io::Result<()> {
            self.0.sync_data()
        }
    }

    impl Storage for Shifting {
        fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
            let file = self.inner.open(path, mode)?;
            if !path.ends_with(STATE_FILE) {
                return Ok(file);
            }
            let n = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            // Opens 3a, 3a + 1 and 3a + 2 read the header, copy the file
            // and read the header again in copy a + 1.
            Ok(if n % 3 == 2 && n < 3 * self.unstable {
                Box::new(Flipped(file))
            } else {
                file
            })
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
        fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn crate::storage::DirLock>> {
            self.inner.lock_dir(dir)
        }
    }

    #[test]
    fn a_copy_the_files_changed_under_is_taken_again_and_then_refused_naming_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(dir.path(), EngineOptions::default()).unwrap();
        let open = |unstable| {
            let storage = Arc::new(Shifting {
                inner: FsStorage::new(),
                reads: std::sync::atomic::AtomicU32::new(0),
                unstable,
            });
            let clock = Arc::new(crate::clock::ManualClock::new(0));
            let opened = Engine::open_snapshot_with(
                storage.clone(),
                clock,
                dir.path(),
                EngineOptions::default(),
            );
            (
                opened,
                storage.reads.load(std::sync::atomic::Ordering::SeqCst),
            )
        };
        let (opened, reads) = open(3);
        assert_eq!(
            opened.unwrap().snapshot_lsn(),
            Some(engine.durable_lsn()),
            "the fourth copy is stable"
        );
        assert_eq!(
            reads, 12,
            "four copies, each opening the state store thrice"
        );
        let (refused, _) = open(SNAPSHOT_ATTEMPTS);
        let Err(Error::SnapshotUnstable {
            dir: named,
            attempts,
            changed,
        }) = refused
        else {
            panic!("every copy changed: {refused:?}")
        };
        assert_eq!(named, dir.path());
        assert_eq!(attempts, u64::from(SNAPSHOT_ATTEMPTS));
        assert!(changed.contains("state store"), "{changed}");
    }
}
