//! `SimDisk`: the simulated disk's handle and its `Storage` implementation
//! (the directory side: open, create, list, rename, remove, sync, lock).
//!
//! **Invariant:** a `SimDisk` is a cheap, cloneable handle on one shared
//! state; every trait call takes the state's mutex once, goes through
//! `DiskState::run_op`, and so is counted, traced and subject to power loss.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actum::storage::{DirLock, OpenMode, Storage, StorageFile};

use super::errors;
use super::faults::FaultConfig;
use super::file::SimFile;
use super::lock::SimDirLock;
use super::namespace::{Entry, SimPath};
use super::state::{DiskState, OpKind, RotRecord};
use crate::rng::Rng;

/// The name of the (empty) lock file `lock_dir` creates, as `FsStorage` does,
/// so directory listings look the same on both.
pub const LOCK_FILE_NAME: &str = "LOCK";

/// Takes the state lock. A poisoned lock means a test already panicked
/// mid-operation; carrying on would only bury that panic, except in `Drop`,
/// which uses [`lock_state_for_drop`] to avoid a double panic.
pub(crate) fn lock_state(state: &Mutex<DiskState>) -> MutexGuard<'_, DiskState> {
    state
        .lock()
        .expect("SimDisk state mutex poisoned: an earlier panic happened mid-operation")
}

/// Takes the state lock from a destructor, ignoring poison.
pub(crate) fn lock_state_for_drop(state: &Mutex<DiskState>) -> MutexGuard<'_, DiskState> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A simulated disk: a `Storage` that loses, tears and corrupts data the way
/// real disks and file systems may (see docs/SIMULATION.md, "Fault model").
/// Clones share the same disk.
#[derive(Clone)]
pub struct SimDisk {
    state: Arc<Mutex<DiskState>>,
}

impl fmt::Debug for SimDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock_state_for_drop(&self.state);
        f.debug_struct("SimDisk")
            .field("ops_count", &state.ops_count)
            .field("generation", &state.generation)
            .field("inodes", &state.inodes.len())
            .field("powered_off", &state.powered_off)
            .finish_non_exhaustive()
    }
}

impl SimDisk {
    /// An empty disk (just a root directory) that draws its faults from
    /// `rng`; pass a stream forked for the disk, e.g. `seed_rng.fork("disk")`.
    pub fn new(rng: Rng, faults: FaultConfig) -> Self {
        SimDisk {
            state: Arc::new(Mutex::new(DiskState::new(rng, faults))),
        }
    }

    fn lock(&self) -> MutexGuard<'_, DiskState> {
        lock_state(&self.state)
    }

    /// Runs `read` as a reader from another process whose I/O this disk
    /// does not hold against the schedule: its calls inject no fault, arm
    /// no power cut, and are neither counted nor traced, and the fault
    /// stream is left where it was, so what the seed does next is what it
    /// would have done without it. What the calls do stays done (a sync
    /// makes durable what it syncs). For an operator who reads the live
    /// database in the fault phase.
    pub fn quietly<T>(&self, read: impl FnOnce() -> T) -> T {
        let kept = {
            let mut state = self.lock();
            let kept = (
                state.faults.clone(),
                state.rng.clone(),
                state.ops_count,
                state.power_loss_at_op.take(),
                state.trace,
            );
            state.faults = FaultConfig::none();
            kept
        };
        let value = read();
        let mut state = self.lock();
        (
            state.faults,
            state.rng,
            state.ops_count,
            state.power_loss_at_op,
            state.trace,
        ) = kept;
        value
    }

    /// The faults in force.
    pub fn faults(&self) -> FaultConfig {
        self.lock().faults.clone()
    }

    /// Replaces the faults in force (say, `FaultConfig::none()` for the
    /// healing phase after a faulty one).
    pub fn set_faults(&self, faults: FaultConfig) {
        faults.assert_valid();
        self.lock().faults = faults;
    }

    /// Faults stop: any armed power cut is disarmed and the plainest crash
    /// behaviour ([`FaultConfig::none`]) installed, keeping the files named
    /// sector-atomic. Campaigns call it to show that the system heals.
    pub fn stop_faults(&self) {
        self.disarm_crash();
        let sector_atomic_suffixes = self.faults().sector_atomic_suffixes;
        self.set_faults(FaultConfig {
            sector_atomic_suffixes,
            ..FaultConfig::none()
        });
    }

    /// How many `Storage`/`StorageFile` calls this disk has seen, failed ones
    /// included, since it was made (crashes do not reset it).
    pub fn ops_count(&self) -> u64 {
        self.lock().ops_count
    }

    /// Schedules a power cut: the `n`-th call from now (counting from 1) is
    /// the one during which power is lost; it and every later call fail with
    /// [`errors::POWER_LOSS_MESSAGE`] until [`SimDisk::crash`] reboots the
    /// disk. `n == 0` cuts the power at once. A failing call has no effect:
    /// what it might have half-done is covered by the crash tearing whatever
    /// was unsynced.
    ///
    /// [`errors::POWER_LOSS_MESSAGE`]: super::POWER_LOSS_MESSAGE
    pub fn set_crash_after_ops(&self, n: u64) {
        let mut state = self.lock();
        if n == 0 {
            state.powered_off = true;
        } else {
            let at_op = state
                .ops_count
                .checked_add(n)
                .expect("op count fits in u64");
            state.power_loss_at_op = Some(at_op);
        }
    }

    /// Cancels a power cut armed by [`SimDisk::set_crash_after_ops`] that has
    /// not happened yet.
    pub fn disarm_crash(&self) {
        self.lock().power_loss_at_op = None;
    }

    /// Whether power is out (calls fail until [`SimDisk::crash`]).
    pub fn is_powered_off(&self) -> bool {
        self.lock().powered_off
    }

    /// Power cut and reboot, in place: unsynced changes are kept, lost or
    /// torn as the fault config says, drawing from `rng`; every open handle
    /// and lock dies; power comes back on.
    pub fn crash(&self, rng: &mut Rng) {
        self.lock().crash(rng);
    }

    /// Bit rot: flips one random bit of `path`'s synced content, drawing from
    /// `rng`. Returns where, or `None` if nothing of the file is synced yet.
    /// Not an I/O call: not counted, and works with the power out.
    pub fn rot(&self, path: &Path, rng: &mut Rng) -> io::Result<Option<RotRecord>> {
        self.rot_within(path, 0..u64::MAX, rng)
    }

    /// Bit rot confined to the byte range `within` of `path` (clipped to
    /// its synced content): for aiming at the bytes that matter.
    pub fn rot_within(
        &self,
        path: &Path,
        within: std::ops::Range<u64>,
        rng: &mut Rng,
    ) -> io::Result<Option<RotRecord>> {
        let mut state = self.lock();
        let result = state.rot(path, within, rng);
        let offset_bytes = match &result {
            Ok(Some(record)) => record.offset_bytes,
            _ => 0,
        };
        state.record(
            OpKind::Rot,
            &path.to_string_lossy(),
            offset_bytes,
            0,
            0,
            &result,
        );
        result
    }

    /// Every bit flipped by [`SimDisk::rot`] so far, oldest first. A record
    /// stays listed after the byte is overwritten; the checker decides.
    pub fn rotted(&self) -> Vec<RotRecord> {
        self.lock().rotted.clone()
    }

    /// A running hash of every call, its arguments and outcome (and every
    /// crash and rot): equal seeds must give equal hashes.
    pub fn trace_hash(&self) -> u64 {
        self.lock().trace.finish()
    }

    /// The visible content of every file, by canonical path (`/a/b`). Right
    /// after [`SimDisk::crash`] this is the durable state. Not an I/O call.
    pub fn snapshot(&self) -> BTreeMap<String, Vec<u8>> {
        let state = self.lock();
        state
            .namespace
            .files()
            .into_iter()
            .map(|(path, inode)| (path, state.inode(inode).volatile.clone()))
            .collect()
    }

    /// The files some handle still holds open, by canonical path (a file
    /// removed since it was opened as `inode N`), and how many handles
    /// each. Handles a crash killed are not counted. Not an I/O call.
    pub fn open_files(&self) -> BTreeMap<String, u32> {
        let state = self.lock();
        let mut paths: BTreeMap<_, String> = BTreeMap::new();
        for (path, inode) in state.namespace.files() {
            paths.entry(inode).or_insert(path);
        }
        state
            .inodes
            .iter()
            .filter(|(_, inode)| inode.open_handles > 0)
            .map(|(id, inode)| {
                let name = paths
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| format!("inode {}", id.0));
                (name, inode.open_handles)
            })
            .collect()
    }

    /// Bytes used by live files (their visible lengths).
    pub fn used_bytes(&self) -> u64 {
        self.lock().used_bytes()
    }

    fn run<T>(
        &self,
        kind: OpKind,
        path: &Path,
        body: impl FnOnce(&mut DiskState, SimPath) -> io::Result<T>,
    ) -> io::Result<T> {
        let shown = path.to_string_lossy();
        self.lock().run_op(kind, &shown, 0, 0, 0, |state| {
            let sim_path = SimPath::parse(path)?;
            body(state, sim_path)
        })
    }
}

impl Storage for SimDisk {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        let (inode, generation, shown) = self.run(OpKind::Open, path, |state, path| {
            let (parent, name, entry) = state.namespace.lookup(&path)?;
            let inode = match (entry, mode) {
                (Some(Entry::Dir(_)), _) => return Err(errors::is_a_directory(&path.display)),
                (Some(Entry::File(_)), OpenMode::CreateNew) => {
                    return Err(errors::already_exists(&path.display));
                }
                (Some(Entry::File(inode)), _) => inode,
                (None, OpenMode::Existing) => return Err(errors::not_found(&path.display)),
                (None, OpenMode::CreateNew | OpenMode::OpenOrCreate) => {
                    let inode = state.new_inode();
                    let replaced = state.namespace.insert(parent, name, Entry::File(inode));
                    assert!(replaced.is_none());
                    inode
                }
            };
            state.inode_mut(inode).open_handles += 1;
            Ok((inode, state.generation, path.display))
        })?;
        Ok(Box::new(SimFile::new(
            Arc::clone(&self.state),
            inode,
            generation,
            shown,
        )))
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.run(OpKind::CreateDirAll, dir, |state, path| {
            state.namespace.create_dir_all(&path)
        })
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.run(OpKind::ListDir, dir, |state, path| {
            let id = state.namespace.resolve_dir(&path.names, &path.display)?;
            Ok(state.namespace.list(id))
        })
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        self.run(OpKind::Exists, path, |state, path| {
            if path.names.is_empty() {
                return Ok(true);
            }
            match state.namespace.lookup(&path) {
                Ok((_, _, entry)) => Ok(entry.is_some()),
                Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(error) => Err(error),
            }
        })
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let to_path = SimPath::parse(to);
        self.run(OpKind::Rename, from, |state, from| {
            let to = to_path?;
            let (from_dir, from_name, entry) = state.namespace.lookup(&from)?;
            let inode = match entry {
                Some(Entry::File(inode)) => inode,
                Some(Entry::Dir(_)) => {
                    return Err(errors::invalid_path(
                        &from.display,
                        "SimDisk renames files only",
                    ));
                }
                None => return Err(errors::not_found(&from.display)),
            };
            let (to_dir, to_name, target) = state.namespace.lookup(&to)?;
            if let Some(Entry::Dir(_)) = target {
                return Err(errors::is_a_directory(&to.display));
            }
            if (from_dir, from_name) == (to_dir, to_name) {
                return Ok(());
            }
            let removed = state.namespace.remove(from_dir, from_name);
            assert_eq!(removed, Some(Entry::File(inode)));
            if let Some(Entry::File(replaced)) =
                state.namespace.insert(to_dir, to_name, Entry::File(inode))
            {
                state.collect_inode(replaced);
            }
            Ok(())
        })
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.run(OpKind::RemoveFile, path, |state, path| {
            let (dir, name, entry) = state.namespace.lookup(&path)?;
            match entry {
                Some(Entry::File(inode)) => {
                    state.namespace.remove(dir, name);
                    state.collect_inode(inode);
                    Ok(())
                }
                Some(Entry::Dir(_)) => Err(errors::is_a_directory(&path.display)),
                None => Err(errors::not_found(&path.display)),
            }
        })
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.run(OpKind::SyncDir, dir, |state, path| {
            let id = state.namespace.resolve_dir(&path.names, &path.display)?;
            state.namespace.sync(id);
            Ok(())
        })
    }

    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn DirLock>> {
        let (id, generation) = self.run(OpKind::LockDir, dir, |state, path| {
            let id = state.namespace.resolve_dir(&path.names, &path.display)?;
            if state.locked_dirs.contains(&id) {
                return Err(errors::would_block(&path.display));
            }
            match state.namespace.get(id, LOCK_FILE_NAME) {
                Some(Entry::File(_)) => {}
                Some(Entry::Dir(_)) => return Err(errors::is_a_directory(&path.display)),
                None => {
                    let inode = state.new_inode();
                    state
                        .namespace
                        .insert(id, LOCK_FILE_NAME, Entry::File(inode));
                }
            }
            state.locked_dirs.insert(id);
            Ok((id, state.generation))
        })?;
        Ok(Box::new(SimDirLock::new(
            Arc::clone(&self.state),
            id,
            generation,
        )))
    }
}
