//! Creating a new database directory, restartably.
//!
//! Invariant: a directory holds a usable database exactly when it holds a
//! manifest and no `CREATING` marker. The marker is made durable before the
//! first file of the new database and removed (durably) after the last, so
//! a crash anywhere in between leaves the marker, and the next open starts
//! the creation over instead of reading a half-made database.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::ids::{DatabaseId, Lsn};
use crate::manifest::{Manifest, ManifestStore};
use crate::storage::{OpenMode, Storage};
use crate::wal::{Wal, WalOptions};

/// Name of the marker that says a creation is under way.
pub(crate) const CREATING_MARKER: &str = "CREATING";
/// Name of the WAL directory inside the database directory.
pub(crate) const WAL_DIR: &str = "wal";
/// Name of the state store file inside the database directory.
pub(crate) const STATE_FILE: &str = "state.redb";
/// The manifest copies' file names, as the manifest module writes them.
pub(crate) const MANIFEST_FILES: [&str; 2] = ["MANIFEST-0", "MANIFEST-1"];

/// Whether `dir` holds neither manifest copy (so there is no database yet).
pub(crate) fn has_no_manifest(storage: &dyn Storage, dir: &Path) -> Result<bool> {
    for name in MANIFEST_FILES {
        let path = dir.join(name);
        let exists = storage
            .exists(&path)
            .map_err(|e| Error::io("look for manifest", &path, e))?;
        if exists {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether an earlier creation of `dir` was interrupted.
pub(crate) fn creation_interrupted(storage: &dyn Storage, dir: &Path) -> Result<bool> {
    let marker = dir.join(CREATING_MARKER);
    storage
        .exists(&marker)
        .map_err(|e| Error::io("look for creation marker", &marker, e))
}

/// Creates a new, empty database in `dir` (which the caller has locked),
/// removing whatever an interrupted earlier creation left behind.
pub(crate) fn create_database(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    database_id: DatabaseId,
    wal_options: WalOptions,
) -> Result<(ManifestStore, Manifest, Wal)> {
    let marker = dir.join(CREATING_MARKER);
    if !creation_interrupted(storage.as_ref(), dir)? {
        storage
            .open(&marker, OpenMode::OpenOrCreate)
            .map_err(|e| Error::io("create creation marker", &marker, e))?;
        sync_dir(storage.as_ref(), dir)?;
    }
    remove_leftovers(storage.as_ref(), dir)?;

    let wal_dir = dir.join(WAL_DIR);
    let wal = Wal::create(Arc::clone(storage), &wal_dir, database_id, wal_options)?;
    let initial = Manifest::new(database_id, STATE_FILE);
    let store = ManifestStore::create(Arc::clone(storage), dir, initial.clone())?;
    // The marker goes last: until this directory sync, a crash restarts the
    // creation from scratch.
    storage
        .remove_file(&marker)
        .map_err(|e| Error::io("remove creation marker", &marker, e))?;
    sync_dir(storage.as_ref(), dir)?;
    assert_eq!(wal.durable_lsn(), Lsn::ZERO, "a new log holds no records");
    assert_eq!(
        store.current(),
        &initial,
        "the manifest holds what we wrote"
    );
    Ok((store, initial, wal))
}

/// Removes the manifest copies, state file and WAL segments an interrupted
/// creation may have left, so the new database starts from nothing.
fn remove_leftovers(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let mut doomed: Vec<std::path::PathBuf> = MANIFEST_FILES
        .iter()
        .chain([STATE_FILE].iter())
        .map(|name| dir.join(name))
        .collect();
    let wal_dir = dir.join(WAL_DIR);
    if storage
        .exists(&wal_dir)
        .map_err(|e| Error::io("look for WAL directory", &wal_dir, e))?
    {
        let names = storage
            .list_dir(&wal_dir)
            .map_err(|e| Error::io("list WAL directory", &wal_dir, e))?;
        doomed.extend(names.iter().map(|name| wal_dir.join(name)));
    }
    for path in doomed {
        let exists = storage
            .exists(&path)
            .map_err(|e| Error::io("look for leftover file", &path, e))?;
        if exists {
            storage
                .remove_file(&path)
                .map_err(|e| Error::io("remove leftover file", &path, e))?;
        }
    }
    sync_dir(storage, dir)
}

/// `sync_dir` with the directory named in the error.
pub(crate) fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("sync directory", dir, e))
}
