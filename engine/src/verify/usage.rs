//! What a database directory's files weigh: the manifest copies, the WAL
//! segments, the state store and its page sums, read without writing.
//!
//! **Invariant:** sizes are of the files on the disk as they are, read
//! through the storage given (never through a recovery that would change
//! them first).

use std::io;
use std::path::Path;

use serde::Serialize;

use crate::db::{MANIFEST_FILES, STATE_FILE, WAL_DIR};
use crate::error::{Error, Result};
use crate::storage::{OpenMode, Storage};
use crate::wal::format::parse_segment_file_name;

/// The sizes of a database directory's files, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiskUsage {
    /// Both manifest copies.
    pub manifest_bytes: u64,
    /// WAL segment files (live ones and spares kept for reuse).
    pub wal_segments: u64,
    /// Their bytes (segments are preallocated, so this is their full size).
    pub wal_bytes: u64,
    /// The state store file.
    pub state_bytes: u64,
    /// The state store's page sums (`state.redb.sums`: written at a clean
    /// close, spoiled, its length kept, once an engine that has the
    /// database open writes the store).
    pub page_sums_bytes: u64,
    /// All of the above.
    pub total_bytes: u64,
}

/// The size of `path`, 0 if it does not exist.
fn size_of(storage: &dyn Storage, path: &Path) -> Result<u64> {
    match storage.open(path, OpenMode::Existing) {
        Ok(file) => file.len().map_err(|e| Error::io("stat file", path, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(Error::io("open file to stat it", path, e)),
    }
}

/// Reads the sizes of the files of the database in `dir`, whose state
/// store is `state_file` (`None`: the default name).
pub fn disk_usage(
    storage: &dyn Storage,
    dir: &Path,
    state_file: Option<&str>,
) -> Result<DiskUsage> {
    let mut usage = DiskUsage::default();
    for name in MANIFEST_FILES {
        usage.manifest_bytes += size_of(storage, &dir.join(name))?;
    }
    let wal_dir = dir.join(WAL_DIR);
    let names = match storage.list_dir(&wal_dir) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io("list WAL directory", &wal_dir, e)),
    };
    for name in names
        .iter()
        .filter(|n| parse_segment_file_name(n).is_some())
    {
        usage.wal_segments += 1;
        usage.wal_bytes += size_of(storage, &wal_dir.join(name))?;
    }
    let state = dir.join(state_file.unwrap_or(STATE_FILE));
    usage.state_bytes = size_of(storage, &state)?;
    usage.page_sums_bytes = size_of(storage, &crate::state::sums_path(&state))?;
    usage.total_bytes =
        usage.manifest_bytes + usage.wal_bytes + usage.state_bytes + usage.page_sums_bytes;
    assert!(usage.total_bytes >= usage.wal_bytes);
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineOptions};
    use crate::storage::FsStorage;

    #[test]
    fn the_page_sums_count_once_written_and_every_file_is_in_the_total() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = Engine::open(dir.path(), EngineOptions::default()).expect("open");
        let open = disk_usage(&FsStorage::new(), dir.path(), None).expect("usage");
        assert_eq!(open.page_sums_bytes, 0, "none yet in a new database");
        engine.close().expect("close");
        let closed = disk_usage(&FsStorage::new(), dir.path(), None).expect("usage");
        let sums = std::fs::metadata(dir.path().join("state.redb.sums"))
            .expect("written at the close")
            .len();
        assert!(sums > 0);
        assert_eq!(closed.page_sums_bytes, sums);
        assert_eq!(
            closed.total_bytes,
            closed.manifest_bytes + closed.wal_bytes + closed.state_bytes + sums
        );
    }
}
