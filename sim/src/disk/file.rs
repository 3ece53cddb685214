//! `SimFile`: a handle on one simulated file, implementing `StorageFile`,
//! with the write-path faults (ENOSPC, short writes, fsync EIO).
//!
//! **Invariant:** a handle names an inode, not a path, so it keeps working
//! after its file is renamed or removed (POSIX), and it is dead (every call
//! fails) once the disk has crashed since it was opened.

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};

use actum::storage::StorageFile;

use super::errors;
use super::image::Pending;
use super::namespace::InodeId;
use super::sim_disk::{lock_state, lock_state_for_drop};
use super::state::{DiskState, OpKind};
use crate::fnv::fnv1a64;

/// The largest simulated file: a write or `set_len` past it fails with
/// `FileTooLarge`, so a wild offset cannot exhaust the host's memory.
pub const FILE_SIZE_MAX_BYTES: u64 = 1 << 32;

/// An open simulated file.
pub struct SimFile {
    state: Arc<Mutex<DiskState>>,
    inode: InodeId,
    generation: u64,
    path: String,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .field("inode", &self.inode)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

fn file_too_large(path: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("simulated disk: {path} would pass {FILE_SIZE_MAX_BYTES} bytes"),
    )
}

impl SimFile {
    pub(crate) fn new(
        state: Arc<Mutex<DiskState>>,
        inode: InodeId,
        generation: u64,
        path: String,
    ) -> Self {
        SimFile {
            state,
            inode,
            generation,
            path,
        }
    }

    fn run<T>(
        &self,
        kind: OpKind,
        offset_bytes: u64,
        len_bytes: u64,
        detail: u64,
        body: impl FnOnce(&mut DiskState) -> io::Result<T>,
    ) -> io::Result<T> {
        lock_state(&self.state).run_op(kind, &self.path, offset_bytes, len_bytes, detail, |state| {
            if state.generation != self.generation {
                return Err(errors::stale_handle(&self.path));
            }
            body(state)
        })
    }

    /// How many bytes of a write ending at `end_bytes` fit on the disk, from
    /// `offset_bytes`; `None` if all of it does.
    fn capacity_prefix(&self, state: &DiskState, offset_bytes: u64, end_bytes: u64) -> Option<u64> {
        let capacity_bytes = state.faults.capacity_bytes?;
        let len_bytes = state.inode(self.inode).volatile.len() as u64;
        let growth_bytes = end_bytes.saturating_sub(len_bytes);
        let free_bytes = capacity_bytes.saturating_sub(state.used_bytes());
        if growth_bytes <= free_bytes {
            return None;
        }
        let fits_end_bytes = len_bytes + free_bytes;
        Some(
            fits_end_bytes
                .saturating_sub(offset_bytes)
                .min(end_bytes - offset_bytes),
        )
    }

    fn write_prefix(
        &self,
        state: &mut DiskState,
        offset_bytes: u64,
        data: &[u8],
        prefix_bytes: u64,
    ) {
        assert!(prefix_bytes <= data.len() as u64);
        if prefix_bytes > 0 {
            let prefix = data[..super::image::to_usize(prefix_bytes)].to_vec();
            state.inode_mut(self.inode).change(Pending::Write {
                offset_bytes,
                data: prefix,
            });
        }
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        self.run(OpKind::ReadAt, offset_bytes, buf.len() as u64, 0, |state| {
            let image = &state.inode(self.inode).volatile;
            let end_bytes = offset_bytes.checked_add(buf.len() as u64);
            match end_bytes {
                Some(end_bytes) if end_bytes <= image.len() as u64 => {
                    let start = super::image::to_usize(offset_bytes);
                    buf.copy_from_slice(&image[start..start + buf.len()]);
                    Ok(())
                }
                _ => Err(errors::unexpected_eof(
                    &self.path,
                    offset_bytes,
                    buf.len() as u64,
                )),
            }
        })
    }

    /// Draws two values (ENOSPC, short write) per call, and one more for the
    /// length of a short write.
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> io::Result<()> {
        let len_bytes = data.len() as u64;
        self.run(
            OpKind::WriteAt,
            offset_bytes,
            len_bytes,
            fnv1a64(data),
            |state| {
                let end_bytes = match offset_bytes.checked_add(len_bytes) {
                    Some(end_bytes) if end_bytes <= FILE_SIZE_MAX_BYTES => end_bytes,
                    _ => return Err(file_too_large(&self.path)),
                };
                let enospc = state.rng.chance_ppm(state.faults.enospc_ppm);
                let short = state.rng.chance_ppm(state.faults.write_short_ppm);
                if enospc {
                    return Err(errors::enospc(&self.path));
                }
                if let Some(prefix_bytes) = self.capacity_prefix(state, offset_bytes, end_bytes) {
                    self.write_prefix(state, offset_bytes, data, prefix_bytes);
                    return Err(errors::enospc(&self.path));
                }
                if short && len_bytes > 0 {
                    let prefix_bytes = state.rng.below(len_bytes);
                    self.write_prefix(state, offset_bytes, data, prefix_bytes);
                    return Err(errors::eio("write", &self.path));
                }
                self.write_prefix(state, offset_bytes, data, len_bytes);
                Ok(())
            },
        )
    }

    fn len(&self) -> io::Result<u64> {
        self.run(OpKind::Len, 0, 0, 0, |state| {
            Ok(state.inode(self.inode).volatile.len() as u64)
        })
    }

    /// Draws one value (ENOSPC) per call.
    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.run(OpKind::SetLen, 0, len_bytes, 0, |state| {
            if len_bytes > FILE_SIZE_MAX_BYTES {
                return Err(file_too_large(&self.path));
            }
            let enospc = state.rng.chance_ppm(state.faults.enospc_ppm);
            let current_bytes = state.inode(self.inode).volatile.len() as u64;
            if len_bytes > current_bytes
                && (enospc
                    || self
                        .capacity_prefix(state, current_bytes, len_bytes)
                        .is_some())
            {
                return Err(errors::enospc(&self.path));
            }
            state
                .inode_mut(self.inode)
                .change(Pending::SetLen { len_bytes });
            Ok(())
        })
    }

    /// Draws one value (EIO) per call, plus one per unsynced change on EIO.
    fn sync_data(&self) -> io::Result<()> {
        self.run(OpKind::SyncData, 0, 0, 0, |state| {
            let eio = state.rng.chance_ppm(state.faults.sync_eio_ppm);
            let DiskState { inodes, rng, .. } = state;
            let inode = inodes
                .get_mut(&self.inode)
                .expect("a live handle names a live inode");
            // Linux reports a writeback error only if there was something to
            // write back; a clean file syncs fine.
            if eio && !inode.pending.is_empty() {
                inode.sync_failed(rng);
                return Err(errors::eio("sync_data", &self.path));
            }
            inode.sync();
            Ok(())
        })
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut state = lock_state_for_drop(&self.state);
        if state.generation != self.generation {
            return; // The crash already dropped every handle.
        }
        let inode = state.inode_mut(self.inode);
        assert!(inode.open_handles > 0, "handle count underflow");
        inode.open_handles -= 1;
        state.collect_inode(self.inode);
    }
}
