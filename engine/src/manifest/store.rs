//! [`ManifestStore`]: the two manifest copies of one database directory,
//! written in rotation.
//!
//! **Invariant:** outside an `update` in progress, the copy not being written
//! holds the current manifest durably, so a crash at any point leaves at
//! least one valid copy, holding either the previous or the new manifest.
//! Each update overwrites only the older copy, in place, and returns after
//! `sync_data` on it. docs/DURABILITY.md ("Manifest update") walks through
//! the steps and what a crash at each one leaves behind.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::choose::choose;
use super::content::Manifest;
use super::copy::{COPY_FILE_NAMES, copy_path, read_copy, write_copy};
use crate::error::{Error, Result};
use crate::storage::{OpenMode, Storage, StorageFile};

/// What [`ManifestStore::open`] found: which copy won and why any copy was
/// rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestReport {
    /// The path of the copy the current manifest was read from.
    pub chosen: PathBuf,
    /// One reason per invalid copy, naming its file and byte offset. Empty
    /// when both copies are intact (the other one is then just older).
    pub rejected: Vec<String>,
}

/// Owns a database's two manifest copies and the current manifest.
///
/// Used from one thread at a time; callers that share it wrap it in a mutex.
#[derive(Debug)]
pub struct ManifestStore {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// Open handles by slot; `None` for a copy that was missing at open and
    /// has not been rewritten since.
    files: [Option<Box<dyn StorageFile>>; 2],
    /// A copy file was created after open and its directory entry is not
    /// yet known to be durable; kept across failed updates so a retry still
    /// syncs the directory.
    dir_sync_pending: bool,
    /// The copies were read without being synced first
    /// ([`ManifestStore::open_unsynced`]): they and their directory entries
    /// are made durable before anything builds on them
    /// ([`ManifestStore::make_durable`], which every update calls first).
    trust_sync_pending: bool,
    /// The slot holding `current`; the next update writes the other one.
    current_slot: usize,
    current: Manifest,
}

impl ManifestStore {
    /// Creates both copies in `dir` for a new database; fails if either
    /// exists.
    ///
    /// `initial.sequence` must be 1. Copy 0 receives `initial`; copy 1
    /// receives the same content with sequence 0, so both slots are valid
    /// and full-size from the start. Returns after both copies and the
    /// directory entries are durable.
    pub fn create(storage: Arc<dyn Storage>, dir: &Path, initial: Manifest) -> Result<Self> {
        assert_eq!(initial.sequence, 1, "a new manifest starts at sequence 1");
        initial
            .validate()
            .map_err(|reason| Error::InvalidConfig { reason })?;
        for slot in 0..COPY_FILE_NAMES.len() {
            let path = copy_path(dir, slot);
            let exists = storage
                .exists(&path)
                .map_err(|error| Error::io("check manifest copy", &path, error))?;
            if exists {
                let error = io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "a manifest copy already exists; refusing to create a database over it",
                );
                return Err(Error::io("create manifest", path, error));
            }
        }
        let placeholder = Manifest {
            sequence: 0,
            ..initial.clone()
        };
        let zero = create_copy(storage.as_ref(), &copy_path(dir, 0), &initial)?;
        let one = create_copy(storage.as_ref(), &copy_path(dir, 1), &placeholder)?;
        storage
            .sync_dir(dir)
            .map_err(|error| Error::io("sync database directory", dir, error))?;
        Ok(ManifestStore {
            storage,
            dir: dir.to_path_buf(),
            files: [Some(zero), Some(one)],
            dir_sync_pending: false,
            trust_sync_pending: false,
            current_slot: 0,
            current: initial,
        })
    }

    /// Opens the copies in `dir` and picks the newest valid one; the report
    /// says which copy won and why any was rejected.
    ///
    /// Errors: [`Error::NoValidManifest`] if neither copy is valid,
    /// [`Error::UnsupportedFormat`] if either is an intact copy in another
    /// format version, [`Error::Corrupt`] if the copies disagree about the
    /// database or share a sequence, [`Error::Io`] if a copy cannot be read.
    pub fn open(storage: Arc<dyn Storage>, dir: &Path) -> Result<(Self, Manifest, ManifestReport)> {
        let (mut store, manifest, report) = Self::open_unsynced(storage, dir)?;
        store.make_durable()?;
        Ok((store, manifest, report))
    }

    /// [`ManifestStore::open`] without its syncs: the copies are read as
    /// the page cache holds them, and made durable (with their directory
    /// entries) by [`ManifestStore::make_durable`], which the first update
    /// calls if the caller has not. Until then nothing may be built on the
    /// copy read (no segment removed, nothing appended in a new epoch): a
    /// copy a previous process wrote may still sit only in the page cache.
    /// The database opens this way and syncs at once unless the copy read
    /// records a clean close (docs/DURABILITY.md, "Opening a cleanly closed
    /// database").
    pub fn open_unsynced(
        storage: Arc<dyn Storage>,
        dir: &Path,
    ) -> Result<(Self, Manifest, ManifestReport)> {
        let (file_zero, verdict_zero) = read_copy(storage.as_ref(), &copy_path(dir, 0))?;
        let (file_one, verdict_one) = read_copy(storage.as_ref(), &copy_path(dir, 1))?;
        let choice = choose(dir, [verdict_zero, verdict_one])?;
        assert!(choice.slot < COPY_FILE_NAMES.len());
        assert_eq!(choice.manifest.validate(), Ok(()));
        let report = ManifestReport {
            chosen: copy_path(dir, choice.slot),
            rejected: choice.rejected,
        };
        let store = ManifestStore {
            storage,
            dir: dir.to_path_buf(),
            files: [file_zero, file_one],
            dir_sync_pending: false,
            trust_sync_pending: true,
            current_slot: choice.slot,
            current: choice.manifest.clone(),
        };
        Ok((store, choice.manifest, report))
    }

    /// Drops the pending syncs of [`ManifestStore::open_unsynced`] unmade
    /// (the planted `FirstWriteSkipsOpenSyncs` only).
    pub(crate) fn forget_pending_syncs(&mut self) {
        self.trust_sync_pending = false;
    }

    /// Makes the copies read at open, and their directory entries, durable
    /// (a no-op once done): **fsync: `sync_dir(<db>)`**, then
    /// **fsync: `sync_data`** of each copy. Without it, a copy whose update
    /// failed (a short write followed by EIO, say) can sit complete but
    /// unsynced in the page cache, be read back as the newest root, let the
    /// WAL delete segments it no longer names, and then vanish in a crash;
    /// and a copy of a database made with `cp` is not durable at all.
    pub fn make_durable(&mut self) -> Result<()> {
        self.make_durable_but(None)
    }

    /// [`ManifestStore::make_durable`], leaving out the copy in slot
    /// `overwritten` (an update is about to overwrite and sync it).
    fn make_durable_but(&mut self, overwritten: Option<usize>) -> Result<()> {
        if !self.trust_sync_pending {
            return Ok(());
        }
        self.storage
            .sync_dir(&self.dir)
            .map_err(|e| Error::io("sync database directory", &self.dir, e))?;
        for (slot, file) in self.files.iter().enumerate() {
            if Some(slot) == overwritten {
                continue;
            }
            if let Some(file) = file {
                file.sync_data().map_err(|error| {
                    Error::io("sync manifest copy", copy_path(&self.dir, slot), error)
                })?;
            }
        }
        self.trust_sync_pending = false;
        Ok(())
    }

    /// Durably installs `next`, overwriting the older copy; returns once it
    /// is synced.
    ///
    /// `next.sequence` must be the current sequence plus one (see
    /// [`Manifest::next`]), its database id must be unchanged, and its
    /// applied LSN and first live segment must not move backwards; breaking
    /// these is a bug in the caller and panics.
    ///
    /// On `Err` the new copy may or may not have reached the disk: until a
    /// later update succeeds, both the current and `next` must remain usable
    /// roots (nothing either references may be deleted). `current` is
    /// unchanged, and a retry rewrites the same slot.
    pub fn update(&mut self, next: Manifest) -> Result<()> {
        let current = &self.current;
        assert_eq!(
            Some(next.sequence),
            current.sequence.checked_add(1),
            "a manifest update must advance the sequence by exactly one"
        );
        assert_eq!(next.database_id, current.database_id);
        assert!(next.applied_lsn >= current.applied_lsn);
        assert!(next.first_live_segment >= current.first_live_segment);
        next.validate()
            .map_err(|reason| Error::InvalidConfig { reason })?;
        let target = 1 - self.current_slot;
        // The copy not written must hold the current manifest durably.
        self.make_durable_but(Some(target))?;

        let path = copy_path(&self.dir, target);
        let file = match &mut self.files[target] {
            Some(file) => &**file,
            missing => {
                let file = self
                    .storage
                    .open(&path, OpenMode::OpenOrCreate)
                    .map_err(|error| Error::io("create manifest copy", &path, error))?;
                self.dir_sync_pending = true;
                &**missing.insert(file)
            }
        };
        write_copy(file, &path, &next)?;
        if self.dir_sync_pending {
            // The copy was missing at open; its directory entry is new.
            self.storage
                .sync_dir(&self.dir)
                .map_err(|error| Error::io("sync database directory", &self.dir, error))?;
            self.dir_sync_pending = false;
        }
        self.current_slot = target;
        self.current = next;
        Ok(())
    }

    /// The current manifest: the last one installed or opened.
    pub fn current(&self) -> &Manifest {
        &self.current
    }

    /// The path of the copy holding the current manifest.
    pub fn current_path(&self) -> PathBuf {
        copy_path(&self.dir, self.current_slot)
    }
}

/// Creates the copy file at `path` and writes `manifest` into it, synced.
fn create_copy(
    storage: &dyn Storage,
    path: &Path,
    manifest: &Manifest,
) -> Result<Box<dyn StorageFile>> {
    let file = storage
        .open(path, OpenMode::CreateNew)
        .map_err(|error| Error::io("create manifest copy", path, error))?;
    write_copy(file.as_ref(), path, manifest)?;
    Ok(file)
}
