//! The manifest's share of a verify: each copy decoded on its own (valid,
//! damaged at which byte, missing, or written by another build), then the
//! engine's own choice between them.
//!
//! **Invariant:** a damaged copy is reported even when the other one is
//! current, since the database then has one root left instead of two.

use std::io;
use std::path::Path;
use std::sync::Arc;

use super::report::{Area, Status, VerifyReport};
use crate::db::MANIFEST_FILES;
use crate::error::{Error, Result};
use crate::manifest::{COPY_LEN_MAX, DecodeError, Manifest, ManifestStore, decode};
use crate::storage::{OpenMode, Storage};

/// What one copy holds.
enum Copy {
    Missing,
    Valid(Manifest),
    Invalid { offset: u64, reason: String },
    Unsupported { found: u32 },
}

/// Reads the copy at `path` (at most `COPY_LEN_MAX` bytes, as the engine).
fn read_copy(storage: &dyn Storage, path: &Path) -> Result<Copy> {
    let file = match storage.open(path, OpenMode::Existing) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Copy::Missing),
        Err(e) => return Err(Error::io("open manifest copy", path, e)),
    };
    let len_bytes = file
        .len()
        .map_err(|e| Error::io("stat manifest copy", path, e))?;
    let mut bytes = vec![0u8; len_bytes.min(COPY_LEN_MAX as u64) as usize];
    file.read_at(0, &mut bytes)
        .map_err(|e| Error::io("read manifest copy", path, e))?;
    Ok(match decode(&bytes) {
        Ok(manifest) => Copy::Valid(manifest),
        Err(DecodeError::Invalid { offset, reason }) => Copy::Invalid { offset, reason },
        Err(DecodeError::UnsupportedVersion { found }) => Copy::Unsupported { found },
    })
}

fn describe(manifest: &Manifest) -> String {
    let clean = match manifest.clean_shutdown_lsn {
        Some(lsn) => format!(", closed cleanly at {lsn}"),
        None => String::new(),
    };
    format!(
        "valid copy, sequence {}, database {}, state checkpoint covers {}, oldest live WAL \
         {}{clean}",
        manifest.sequence, manifest.database_id, manifest.applied_lsn, manifest.first_live_segment
    )
}

/// Checks both copies of `dir` (on a read-only `storage`) and the choice
/// between them; returns the current manifest, or `None` if there is none
/// to go on with.
pub(super) fn check(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    report: &mut VerifyReport,
) -> Result<Option<Manifest>> {
    for name in MANIFEST_FILES {
        let path = dir.join(name);
        let (status, offset, what) = match read_copy(storage.as_ref(), &path)? {
            Copy::Valid(manifest) => (Status::Intact, None, describe(&manifest)),
            Copy::Missing => (Status::Damaged, None, "the copy is missing".to_string()),
            Copy::Invalid { offset, reason } => (
                Status::Damaged,
                Some(offset),
                format!("the copy is damaged: {reason}"),
            ),
            Copy::Unsupported { found } => (
                Status::Damaged,
                None,
                format!(
                    "an intact copy in manifest format version {found}, which this build does \
                     not read: a newer build wrote it"
                ),
            ),
        };
        report.push(Area::Manifest, status, (path, offset), what);
    }
    // The engine's own choice between the copies (the same code an open
    // runs), so a verify never disagrees with what an open would do.
    match ManifestStore::open(Arc::clone(storage), dir) {
        Ok((_, manifest, chosen)) => {
            let what = format!(
                "the current root is {} (sequence {})",
                chosen.chosen.display(),
                manifest.sequence
            );
            report.push(Area::Manifest, Status::Intact, (chosen.chosen, None), what);
            Ok(Some(manifest))
        }
        // Each copy's reason is reported above.
        Err(Error::NoValidManifest { .. }) => Ok(None),
        Err(e @ Error::Io { .. }) => Err(e),
        Err(e) => {
            report.damaged_by(Area::Manifest, dir.to_path_buf(), &e);
            Ok(None)
        }
    }
}
