//! `DiskState`: everything one simulated disk knows, behind the `SimDisk`
//! mutex, plus the prologue and epilogue every I/O call goes through.
//!
//! **Invariant:** every `Storage`/`StorageFile` call passes through
//! [`DiskState::run_op`] exactly once, which counts it, fails it after power
//! loss, and folds it into the trace hash; nothing here iterates a hash map.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::PathBuf;

use super::errors;
use super::faults::FaultConfig;
use super::image::Inode;
use super::namespace::{DirId, InodeId, Namespace};
use crate::fnv::Fnv1a64;
use crate::rng::Rng;

/// The kind of a traced event; the discriminant is hashed, so never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpKind {
    Open = 1,
    ReadAt = 2,
    WriteAt = 3,
    Len = 4,
    SetLen = 5,
    SyncData = 6,
    ListDir = 7,
    Rename = 8,
    RemoveFile = 9,
    SyncDir = 10,
    CreateDirAll = 11,
    Exists = 12,
    LockDir = 13,
    Crash = 14,
    Rot = 15,
}

/// Where bit rot flipped a bit, for the checker: reads of this byte must
/// fail (a checksum catches it), never return wrong data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RotRecord {
    /// The file's canonical path (`/a/b`) when it was rotted.
    pub path: PathBuf,
    /// The byte that changed.
    pub offset_bytes: u64,
    /// Which bit of it flipped (0 is the least significant).
    pub bit: u8,
}

/// The mutable state of a `SimDisk`.
#[derive(Debug)]
pub(crate) struct DiskState {
    pub(crate) namespace: Namespace,
    pub(crate) inodes: BTreeMap<InodeId, Inode>,
    next_inode_id: u64,
    pub(crate) faults: FaultConfig,
    /// The disk's own stream: every I/O fault is drawn from it.
    pub(crate) rng: Rng,
    pub(crate) ops_count: u64,
    /// The `ops_count` value of the call that loses power.
    pub(crate) power_loss_at_op: Option<u64>,
    pub(crate) powered_off: bool,
    /// Bumped by every crash; handles and locks from an older generation are dead.
    pub(crate) generation: u64,
    pub(crate) locked_dirs: BTreeSet<DirId>,
    pub(crate) trace: Fnv1a64,
    pub(crate) rotted: Vec<RotRecord>,
}

impl DiskState {
    pub(crate) fn new(rng: Rng, faults: FaultConfig) -> Self {
        faults.assert_valid();
        DiskState {
            namespace: Namespace::new(),
            inodes: BTreeMap::new(),
            next_inode_id: 1,
            faults,
            rng,
            ops_count: 0,
            power_loss_at_op: None,
            powered_off: false,
            generation: 0,
            locked_dirs: BTreeSet::new(),
            trace: Fnv1a64::new(),
            rotted: Vec::new(),
        }
    }

    /// Counts a call, fails it if power is (or just went) out, runs `body`
    /// otherwise, and traces the outcome. `detail` is any extra value that
    /// identifies the call (a hash of written data, say).
    pub(crate) fn run_op<T>(
        &mut self,
        kind: OpKind,
        path: &str,
        offset_bytes: u64,
        len_bytes: u64,
        detail: u64,
        body: impl FnOnce(&mut DiskState) -> io::Result<T>,
    ) -> io::Result<T> {
        self.ops_count += 1;
        if self.power_loss_at_op == Some(self.ops_count) {
            self.powered_off = true;
        }
        let result = if self.powered_off {
            Err(errors::power_loss())
        } else {
            body(self)
        };
        self.record(kind, path, offset_bytes, len_bytes, detail, &result);
        result
    }

    /// Folds an event into the trace hash.
    pub(crate) fn record<T>(
        &mut self,
        kind: OpKind,
        path: &str,
        offset_bytes: u64,
        len_bytes: u64,
        detail: u64,
        result: &io::Result<T>,
    ) {
        self.trace.write_u64(kind as u64);
        self.trace.write_u64(path.len() as u64);
        self.trace.write(path.as_bytes());
        self.trace.write_u64(offset_bytes);
        self.trace.write_u64(len_bytes);
        self.trace.write_u64(detail);
        self.trace.write_u64(errors::result_code(result));
        if let Err(error) = result {
            // Every error here was built by this crate, so its text is stable.
            self.trace.write(error.to_string().as_bytes());
        }
    }

    /// A new, empty inode.
    pub(crate) fn new_inode(&mut self) -> InodeId {
        let id = InodeId(self.next_inode_id);
        self.next_inode_id += 1;
        let previous = self.inodes.insert(id, Inode::default());
        assert!(previous.is_none(), "inode ids are never reused");
        id
    }

    pub(crate) fn inode(&self, id: InodeId) -> &Inode {
        self.inodes
            .get(&id)
            .expect("a live handle or entry names a live inode")
    }

    pub(crate) fn inode_mut(&mut self, id: InodeId) -> &mut Inode {
        self.inodes
            .get_mut(&id)
            .expect("a live handle or entry names a live inode")
    }

    /// Frees `id` if no entry names it and no handle holds it.
    pub(crate) fn collect_inode(&mut self, id: InodeId) {
        let unused = self
            .inodes
            .get(&id)
            .is_some_and(|inode| inode.open_handles == 0);
        if unused && !self.namespace.references(id) {
            self.inodes.remove(&id);
        }
    }

    /// Bytes in use: every live inode's visible length.
    pub(crate) fn used_bytes(&self) -> u64 {
        self.inodes
            .values()
            .map(|inode| inode.volatile.len() as u64)
            .sum()
    }
}
