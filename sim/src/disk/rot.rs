//! Bit rot: flipping bits of synced data at rest, in detect-only mode.
//!
//! The harness rots a few bytes, then demands that reading them yields an
//! error (a checksum mismatch), never wrong data. **Invariant:** rot only
//! touches durable bytes, and shows through to reads only where no unsynced
//! change has replaced the byte in the page cache.

use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

use super::errors;
use super::namespace::{Entry, SimPath};
use super::state::{DiskState, RotRecord};
use crate::rng::Rng;

impl DiskState {
    /// Flips one bit of `path`'s durable content within `within` (clipped
    /// to the file); draws two values from `rng`.
    pub(crate) fn rot(
        &mut self,
        path: &Path,
        within: Range<u64>,
        rng: &mut Rng,
    ) -> io::Result<Option<RotRecord>> {
        let path = SimPath::parse(path)?;
        let inode_id = match self.namespace.lookup(&path)? {
            (_, _, Some(Entry::File(inode))) => inode,
            (_, _, Some(Entry::Dir(_))) => return Err(errors::is_a_directory(&path.display)),
            (_, _, None) => return Err(errors::not_found(&path.display)),
        };
        let inode = self.inode_mut(inode_id);
        let end_bytes = within.end.min(inode.durable.len() as u64);
        if within.start >= end_bytes {
            return Ok(None);
        }
        let offset_bytes = within.start + rng.below(end_bytes - within.start);
        assert!(offset_bytes < end_bytes);
        let bit = u8::try_from(rng.below(8)).expect("below(8) fits in u8");
        let index = super::image::to_usize(offset_bytes);
        inode.durable[index] ^= 1 << bit;
        if !inode.pending_touches(offset_bytes) {
            assert!(
                index < inode.volatile.len(),
                "an untouched durable byte is visible"
            );
            inode.volatile[index] ^= 1 << bit;
        }
        let record = RotRecord {
            path: PathBuf::from(&path.display),
            offset_bytes,
            bit,
        };
        self.rotted.push(record.clone());
        Ok(Some(record))
    }
}
