//! `SimDirLock`: the guard `SimDisk::lock_dir` returns.
//!
//! **Invariant:** a directory is locked while exactly one live guard from the
//! current generation holds it; dropping the guard releases it, and a crash
//! releases every lock (a guard from before the crash then releases nothing).

use std::fmt;
use std::sync::{Arc, Mutex};

use actum::storage::DirLock;

use super::namespace::DirId;
use super::sim_disk::lock_state_for_drop;
use super::state::DiskState;

/// An exclusive lock on a simulated directory, released when dropped.
pub struct SimDirLock {
    state: Arc<Mutex<DiskState>>,
    dir: DirId,
    generation: u64,
}

impl SimDirLock {
    pub(crate) fn new(state: Arc<Mutex<DiskState>>, dir: DirId, generation: u64) -> Self {
        SimDirLock {
            state,
            dir,
            generation,
        }
    }
}

impl fmt::Debug for SimDirLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimDirLock")
            .field("dir", &self.dir)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl DirLock for SimDirLock {}

impl Drop for SimDirLock {
    fn drop(&mut self) {
        let mut state = lock_state_for_drop(&self.state);
        if state.generation == self.generation {
            let released = state.locked_dirs.remove(&self.dir);
            assert!(released, "a live guard's directory is locked");
        }
    }
}
