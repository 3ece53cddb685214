//! Opening a database directory: lock, manifest, WAL recovery.
//!
//! Invariant: a `Db` exists only while it holds the directory's exclusive
//! lock, and its manifest's `applied_lsn` never exceeds the WAL's durable LSN
//! plus nothing: every LSN the manifest claims covered was once durable.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::manifest::{Manifest, ManifestReport, ManifestStore};
use crate::planted::{PlantedBug, planted};
use crate::storage::{DirLock, Storage};
use crate::wal::{FIRST_EPOCH, LogRoot, RecoveryReport, Wal, WalOptions};

use super::create::{WAL_DIR, create_database, creation_interrupted, has_no_manifest, sync_dir};

/// How to open (or create) a database directory.
#[derive(Clone, Debug, Default)]
pub struct DbOptions {
    /// WAL settings (segment size, record limit, repair mode).
    pub wal: WalOptions,
    /// The id to give a *new* database. `None` derives one from the clock
    /// and the process id; the simulator passes one from its seed.
    pub database_id: Option<DatabaseId>,
}

/// What opening found.
#[derive(Debug)]
pub struct OpenReport {
    /// True if the directory held no database and one was created.
    pub created: bool,
    /// Which manifest copy was chosen and why others were rejected
    /// (`None` for a new database).
    pub manifest: Option<ManifestReport>,
    /// What WAL recovery did (`None` for a new database).
    pub recovery: Option<RecoveryReport>,
}

/// An open database directory: lock, manifest and WAL.
#[derive(Debug)]
pub struct Db {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// Shared with the log's step before its first write (`open_epoch`).
    manifest: Arc<Mutex<ManifestStore>>,
    wal: Wal,
    // Declared last so it is dropped last: the lock outlives every handle.
    _lock: Box<dyn DirLock>,
}

impl Db {
    /// Opens the database in `dir`, creating it (and `dir`) if there is none.
    pub fn open(
        storage: Arc<dyn Storage>,
        clock: &dyn Clock,
        dir: &Path,
        options: DbOptions,
    ) -> Result<(Db, OpenReport)> {
        storage
            .create_dir_all(dir)
            .map_err(|e| Error::io("create database directory", dir, e))?;
        let lock = storage.lock_dir(dir).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => Error::Locked {
                dir: dir.to_path_buf(),
            },
            _ => Error::io("lock database directory", dir, e),
        })?;
        let fresh =
            has_no_manifest(storage.as_ref(), dir)? || creation_interrupted(storage.as_ref(), dir)?;
        if fresh {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                // The database directory's own entry must be durable too.
                sync_dir(storage.as_ref(), parent)?;
            }
            let id = options
                .database_id
                .unwrap_or_else(|| derive_database_id(clock, dir));
            let (store, _, wal) = create_database(&storage, dir, id, options.wal)?;
            let db = Db::assemble(storage, dir, store, wal, lock);
            let report = OpenReport {
                created: true,
                manifest: None,
                recovery: None,
            };
            return Ok((db, report));
        }
        let (mut store, manifest, manifest_report) =
            ManifestStore::open_unsynced(Arc::clone(&storage), dir)?;
        // Only a copy no newer copy could have been lost beside proves that
        // nothing was appended after the clean close.
        let clean_end = manifest
            .clean_shutdown_lsn
            .filter(|_| manifest_report.rejected.is_empty());
        // A database closed cleanly was made durable by the close (or is a
        // copy nothing has built on yet): the syncs that make what the open
        // read durable wait for the first append, so an open that only
        // reads makes none (docs/DURABILITY.md, "Opening a cleanly closed
        // database"). Any other open syncs the manifest copies before
        // recovery acts on the one it read.
        if clean_end.is_none() {
            store.make_durable()?;
        }
        // This open's log epoch is the sequence of the manifest update below,
        // higher than every earlier open's (each made one) and every
        // checkpoint's: records it writes never pass for the dropped tail
        // of an earlier one (docs/DURABILITY.md, "Recovery").
        // A new database writes sequence 1 beside a placeholder of sequence
        // 0; the placeholder is current only when copy 0 was damaged before
        // any reopen, and the creation's records already carry epoch
        // `FIRST_EPOCH`, so the epoch steps past it either way.
        let epoch = manifest.sequence.max(FIRST_EPOCH) + 1;
        let skip_syncs = planted(&options.wal, PlantedBug::FirstWriteSkipsOpenSyncs);
        // A log that does not end at the clean shutdown after all is
        // synced at once, and the copy read with it.
        let (wal, recovery) = Wal::open_then(
            Arc::clone(&storage),
            &dir.join(WAL_DIR),
            manifest.database_id,
            options.wal,
            LogRoot {
                first_segment: manifest.first_live_segment,
                covered: manifest.applied_lsn,
                clean_end,
            },
            epoch,
            &mut || store.make_durable(),
        )?;
        if let Some(clean_lsn) = manifest.clean_shutdown_lsn
            && wal.durable_lsn() < clean_lsn
        {
            return Err(Error::corrupt(
                dir.join(WAL_DIR),
                0,
                format!(
                    "the database was closed cleanly at {clean_lsn}, every record up to it \
                     acknowledged, but the log now ends at {}: the tail was damaged",
                    wal.durable_lsn()
                ),
            ));
        }
        if wal.durable_lsn() < manifest.applied_lsn {
            return Err(Error::corrupt(
                dir.join(WAL_DIR),
                0,
                format!(
                    "the manifest says the state covers {} but the log ends at {}: \
                     acknowledged records are missing",
                    manifest.applied_lsn,
                    wal.durable_lsn()
                ),
            ));
        }
        let db = Db::assemble(storage, dir, store, wal, lock);
        // Durable before the first record of this epoch is written, and not
        // before: an open that only reads writes nothing to the manifest
        // (and its close, finding the clean shutdown still recorded, none
        // either).
        let manifest = Arc::clone(&db.manifest);
        let (disk, parent) = (Arc::clone(&db.storage), dir.parent().map(Path::to_path_buf));
        db.wal.before_first_write(Box::new(move || {
            if skip_syncs {
                lock_manifest(&manifest).forget_pending_syncs();
            } else if let Some(parent) = parent.filter(|p| !p.as_os_str().is_empty()) {
                // The database directory's own entry too: a copy made with
                // `cp` may not have one on disk yet.
                sync_dir(disk.as_ref(), &parent)?;
            }
            open_epoch(&manifest, epoch)
        }));
        let report = OpenReport {
            created: false,
            manifest: Some(manifest_report),
            recovery: Some(recovery),
        };
        Ok((db, report))
    }

    fn assemble(
        storage: Arc<dyn Storage>,
        dir: &Path,
        store: ManifestStore,
        wal: Wal,
        lock: Box<dyn DirLock>,
    ) -> Db {
        Db {
            storage,
            dir: dir.to_path_buf(),
            manifest: Arc::new(Mutex::new(store)),
            wal,
            _lock: lock,
        }
    }

    /// The write-ahead log.
    pub fn wal(&self) -> &Wal {
        &self.wal
    }

    /// The database directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The storage this database lives on.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    /// The manifest as last installed.
    pub fn manifest(&self) -> Manifest {
        self.lock_manifest().current().clone()
    }

    /// Records that a durable state checkpoint now covers every record up to
    /// `applied_lsn`, then lets the WAL drop the segments it covers (kept
    /// as spares for reuse, up to a few) and prepares the next segment.
    ///
    /// The caller must have made the state durable first. One manifest
    /// update names both the new `applied_lsn` and the new oldest live
    /// segment, and is synced before any segment is removed, so a crash
    /// between the two leaves extra segments (spares or removed at the next
    /// open), never missing ones.
    pub fn checkpoint(&self, applied_lsn: Lsn) -> Result<SegmentId> {
        assert!(
            applied_lsn <= self.wal.durable_lsn(),
            "a checkpoint cannot cover records that are not durable"
        );
        let mut store = self.lock_manifest();
        let current = store.current().clone();
        assert!(
            applied_lsn >= current.applied_lsn,
            "checkpoints move forward: {} after {}",
            applied_lsn,
            current.applied_lsn
        );
        let first_live = self.wal.first_live_segment_after(applied_lsn);
        assert!(first_live >= current.first_live_segment);
        store.update(Manifest {
            sequence: current.sequence + 1,
            applied_lsn,
            first_live_segment: first_live,
            ..current
        })?;
        self.wal.remove_segments_before(first_live)?;
        // The next segment is made now (from a file GC just kept, when there
        // is one), so the rotation on the commit path is a switch.
        self.wal.prepare_next_segment()?;
        Ok(first_live)
    }

    /// Closes the database cleanly: records in the manifest that every
    /// record up to the durable LSN was acknowledged, so a later open can
    /// tell damage to the final batch from a torn write (see
    /// docs/DURABILITY.md, "Known limits").
    pub fn close(self) -> Result<()> {
        let durable = self.wal.durable_lsn();
        let mut store = self.lock_manifest();
        let current = store.current().clone();
        if current.clean_shutdown_lsn == Some(durable) {
            return Ok(());
        }
        store.update(Manifest {
            sequence: current.sequence + 1,
            clean_shutdown_lsn: Some(durable),
            ..current
        })?;
        assert_eq!(store.current().clean_shutdown_lsn, Some(durable));
        Ok(())
    }

    fn lock_manifest(&self) -> std::sync::MutexGuard<'_, ManifestStore> {
        lock_manifest(&self.manifest)
    }
}

fn lock_manifest(store: &Mutex<ManifestStore>) -> std::sync::MutexGuard<'_, ManifestStore> {
    // A panic while holding the manifest lock leaves the store unchanged
    // on disk; continuing with the in-memory copy is safe.
    store
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Before the first record of an open's `epoch` is written: the copies read
/// at open made durable (if the open left that), then manifest updates
/// until the stored sequence reaches the epoch (two when the placeholder of
/// a new database was current) with no clean shutdown recorded, the
/// database being written again. So the next open's epoch is higher than
/// every record this one writes (docs/DURABILITY.md, "Recovery").
fn open_epoch(store: &Mutex<ManifestStore>, epoch: u64) -> Result<()> {
    let mut store = lock_manifest(store);
    // (The first update makes the copies read at open durable, all but
    // the one it overwrites.)
    while store.current().sequence < epoch || store.current().clean_shutdown_lsn.is_some() {
        let current = store.current().clone();
        store.update(Manifest {
            sequence: current.sequence + 1,
            clean_shutdown_lsn: None,
            ..current
        })?;
    }
    Ok(())
}

/// A database id for a new database, from the clock and the process.
///
/// Uniqueness, not secrecy, is the goal: two databases created by the same
/// process in the same millisecond still differ by directory path.
fn derive_database_id(clock: &dyn Clock, dir: &Path) -> DatabaseId {
    let mut path_hash = crc32fast::Hasher::new();
    path_hash.update(dir.as_os_str().as_encoded_bytes());
    let high = u128::from(clock.now_ms()) << 64;
    let middle = u128::from(std::process::id()) << 32;
    DatabaseId(high | middle | u128::from(path_hash.finalize()))
}
