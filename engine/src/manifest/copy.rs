//! One manifest copy on disk: reading it into a verdict, and writing it.
//!
//! **Invariant:** reading never creates, truncates or writes a file, and a
//! damaged copy becomes a verdict naming its path and byte offset, never an
//! error that stops the other copy from being considered. Only I/O failures
//! other than "not found" are errors: a disk that cannot be read is not
//! evidence that the copy is old.

use std::io;
use std::path::{Path, PathBuf};

use super::codec::{self, COPY_LEN_MAX, COPY_SLOT_BYTES, DecodeError};
use super::content::Manifest;
use crate::error::{Error, Result};
use crate::storage::{OpenMode, Storage, StorageFile};

/// The file names of the two copies, indexed by slot.
pub(crate) const COPY_FILE_NAMES: [&str; 2] = ["MANIFEST-0", "MANIFEST-1"];

/// The path of the copy in `slot` inside `dir`.
pub(crate) fn copy_path(dir: &Path, slot: usize) -> PathBuf {
    assert!(slot < COPY_FILE_NAMES.len());
    dir.join(COPY_FILE_NAMES[slot])
}

/// What one copy turned out to hold.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// An intact copy in the supported format.
    Valid(Manifest),
    /// An intact frame in a format version this build cannot read.
    Unsupported {
        /// The version found.
        found: u32,
    },
    /// Missing, short, damaged or foreign bytes; the reason names the path
    /// and (where there is one) the byte offset.
    Invalid(String),
}

/// Reads the copy at `path`: its open handle (if the file exists) and its
/// verdict.
pub(crate) fn read_copy(
    storage: &dyn Storage,
    path: &Path,
) -> Result<(Option<Box<dyn StorageFile>>, Verdict)> {
    let file = match storage.open(path, OpenMode::Existing) {
        Ok(file) => file,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            let reason = format!("{}: file is missing", path.display());
            return Ok((None, Verdict::Invalid(reason)));
        }
        Err(error) => return Err(Error::io("open manifest copy", path, error)),
    };
    // What a previous process wrote may still sit only in the page cache:
    // the store syncs the copies before anything builds on the one read
    // (`ManifestStore::make_durable`).
    let len_bytes = file
        .len()
        .map_err(|error| Error::io("stat manifest copy", path, error))?;
    // Reading more than any version can declare would only read stale bytes.
    let read_len = len_bytes.min(COPY_LEN_MAX as u64) as usize;
    let mut bytes = vec![0u8; read_len];
    file.read_at(0, &mut bytes)
        .map_err(|error| Error::io("read manifest copy", path, error))?;
    let verdict = match codec::decode(&bytes) {
        Ok(manifest) => Verdict::Valid(manifest),
        Err(DecodeError::UnsupportedVersion { found }) => Verdict::Unsupported { found },
        Err(error @ DecodeError::Invalid { .. }) => {
            Verdict::Invalid(format!("{}: {error}", path.display()))
        }
    };
    Ok((Some(file), verdict))
}

/// Writes `manifest` over the copy in `file`, padded to the slot size, syncs
/// it, and reads it back to check that the storage returns what was written.
pub(crate) fn write_copy(file: &dyn StorageFile, path: &Path, manifest: &Manifest) -> Result<()> {
    let mut bytes = codec::encode(manifest);
    // Pair assertion, first half: the bytes about to be written decode to the
    // manifest they were encoded from.
    assert_eq!(codec::decode(&bytes).as_ref(), Ok(manifest));
    bytes.resize(COPY_SLOT_BYTES, 0);
    file.write_at(0, &bytes)
        .map_err(|error| Error::io("write manifest copy", path, error))?;
    file.sync_data()
        .map_err(|error| Error::io("sync manifest copy", path, error))?;
    // Second half: what the storage hands back is what was written. A
    // mismatch is a storage fault; it is reported, never papered over.
    let mut read_back = vec![0u8; bytes.len()];
    file.read_at(0, &mut read_back)
        .map_err(|error| Error::io("read back manifest copy", path, error))?;
    if let Some(offset) = read_back
        .iter()
        .zip(&bytes)
        .position(|(read, written)| read != written)
    {
        return Err(Error::corrupt(
            path,
            offset as u64,
            "manifest copy reads back different bytes than were just written and synced",
        ));
    }
    Ok(())
}
