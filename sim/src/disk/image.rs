//! One file's content: the durable image, the volatile image, and the list of
//! unsynced changes that lead from the first to the second.
//!
//! **Invariant:** replaying `pending` in order onto `durable` (every change
//! kept whole) yields exactly `volatile`. Syncing empties `pending` and makes
//! `durable` equal `volatile`; a failed sync or a crash replays only some of
//! the changes and makes both images equal to the result.

use crate::rng::{PPM_ONE, Rng};

/// The most unsynced changes one file holds before the oldest is written back
/// (made durable) on its own, as a kernel's background writeback would.
pub const PENDING_CHANGES_MAX: usize = 4096;

/// An unsynced change to a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Pending {
    /// `write_at(offset_bytes, data)`.
    Write { offset_bytes: u64, data: Vec<u8> },
    /// `set_len(len_bytes)`.
    SetLen { len_bytes: u64 },
}

impl Pending {
    /// Applies the change, kept whole, to `image`.
    pub(crate) fn apply(&self, image: &mut Vec<u8>) {
        match self {
            Pending::Write { offset_bytes, data } => apply_write(image, *offset_bytes, data),
            Pending::SetLen { len_bytes } => image.resize(to_usize(*len_bytes), 0),
        }
    }
}

/// Writes `data` at `offset_bytes`, zero-filling any gap past the end.
pub(crate) fn apply_write(image: &mut Vec<u8>, offset_bytes: u64, data: &[u8]) {
    let start = to_usize(offset_bytes);
    let end = start
        .checked_add(data.len())
        .expect("write end fits in usize");
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

/// Converts a simulated file offset or length to an index. The simulator
/// keeps files in memory, so every valid offset fits.
pub(crate) fn to_usize(bytes: u64) -> usize {
    usize::try_from(bytes).expect("a simulated file offset fits in memory")
}

/// A file's content, independent of its names.
#[derive(Clone, Debug, Default)]
pub(crate) struct Inode {
    /// What survives a crash.
    pub(crate) durable: Vec<u8>,
    /// What reads see.
    pub(crate) volatile: Vec<u8>,
    /// Unsynced changes, oldest first.
    pub(crate) pending: Vec<Pending>,
    /// Live handles; an inode with handles outlives its last name.
    pub(crate) open_handles: u32,
}

impl Inode {
    /// Records a change: visible at once, durable only after a sync.
    pub(crate) fn change(&mut self, change: Pending) {
        change.apply(&mut self.volatile);
        self.pending.push(change);
        if self.pending.len() > PENDING_CHANGES_MAX {
            let oldest = self.pending.remove(0);
            oldest.apply(&mut self.durable);
        }
        assert!(self.pending.len() <= PENDING_CHANGES_MAX);
    }

    /// A successful `fdatasync`: content and size become durable. The
    /// pending changes are replayed onto the durable image (the invariant
    /// says that yields the volatile one), which costs the bytes written
    /// since the last sync rather than a copy of the whole file.
    pub(crate) fn sync(&mut self) {
        for change in self.pending.drain(..) {
            change.apply(&mut self.durable);
        }
        assert_eq!(self.durable.len(), self.volatile.len());
    }

    /// A failed `fdatasync` (EIO): each unsynced change independently either
    /// reached the disk or was dropped with its dirty pages. The file then
    /// reads as what the disk holds, and a later sync has nothing to write.
    /// Draws one value per pending change.
    pub(crate) fn sync_failed(&mut self, rng: &mut Rng) {
        let mut image = self.durable.clone();
        for change in &self.pending {
            if rng.chance_ppm(PPM_ONE / 2) {
                change.apply(&mut image);
            }
        }
        self.durable.clone_from(&image);
        self.volatile = image;
        self.pending.clear();
    }

    /// Whether an unsynced change may have altered the byte at `offset_bytes`.
    pub(crate) fn pending_touches(&self, offset_bytes: u64) -> bool {
        self.pending.iter().any(|change| match change {
            Pending::Write {
                offset_bytes: start,
                data,
            } => (*start..start + data.len() as u64).contains(&offset_bytes),
            Pending::SetLen { len_bytes } => *len_bytes <= offset_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay(inode: &Inode) -> Vec<u8> {
        let mut image = inode.durable.clone();
        for change in &inode.pending {
            change.apply(&mut image);
        }
        image
    }

    #[test]
    fn pending_replays_onto_durable_to_give_volatile() {
        let mut inode = Inode::default();
        inode.change(Pending::Write {
            offset_bytes: 4,
            data: vec![1, 2],
        });
        inode.sync();
        inode.change(Pending::SetLen { len_bytes: 2 });
        inode.change(Pending::Write {
            offset_bytes: 8,
            data: vec![3],
        });
        assert_eq!(inode.volatile, [0, 0, 0, 0, 0, 0, 0, 0, 3]);
        assert_eq!(inode.durable, [0, 0, 0, 0, 1, 2]);
        assert_eq!(replay(&inode), inode.volatile);
        inode.sync();
        assert_eq!(inode.durable, inode.volatile);
        assert!(inode.pending.is_empty());
    }

    #[test]
    fn too_many_pending_changes_write_back_the_oldest() {
        let mut inode = Inode::default();
        for index in 0..=PENDING_CHANGES_MAX {
            inode.change(Pending::Write {
                offset_bytes: index as u64,
                data: vec![7],
            });
        }
        assert_eq!(inode.pending.len(), PENDING_CHANGES_MAX);
        assert_eq!(inode.durable, [7]);
        assert_eq!(replay(&inode), inode.volatile);
    }

    #[test]
    fn failed_sync_drops_some_changes_and_leaves_nothing_pending() {
        let mut dropped_any = false;
        for seed in 0..16 {
            let mut inode = Inode::default();
            for index in 0..8u8 {
                inode.change(Pending::Write {
                    offset_bytes: u64::from(index),
                    data: vec![index + 1],
                });
            }
            let written = inode.volatile.clone();
            inode.sync_failed(&mut Rng::new(seed));
            assert!(inode.pending.is_empty());
            assert_eq!(inode.durable, inode.volatile);
            dropped_any |= inode.volatile != written;
        }
        assert!(dropped_any);
    }
}
