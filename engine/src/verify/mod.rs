//! Verifying a database directory without writing to it: every checksum
//! of the manifest copies, the WAL and the state store, and what is
//! damaged and where ([`verify_dir`]); and what the directory's files
//! weigh ([`disk_usage`]).
//!
//! The checks are the engine's own code paths run on a
//! [`ReadOnlyStorage`]: the manifest
//! decoder on each copy and the engine's choice between them; WAL recovery
//! (segment headers, both checksums of every record along the chain, a
//! torn tail told from damage to acknowledged records by the ack
//! watermarks, and, behind a cut at the very start of the log, records
//! the checkpoint covers), then every record read again and its payload
//! decoded;
//! redb's page-checksum walk (`check_integrity`), then every row of every
//! books table decoded and its CRC checked (`state::read_books`).
//!
//! **Invariant:** verifying writes nothing to the directory (whatever
//! recovery would change lands in the overlay), and damage is a finding
//! naming its file and, where the engine knows it, its byte offset, never
//! an `Err` and never a panic; an `Err` means the directory could not be
//! checked at all (no database, locked, unreadable).

mod manifest;
mod report;
mod state;
mod usage;
mod wal;
mod wal_start;

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::engine::require_database;
use crate::error::{Error, Result};
use crate::storage::{ReadOnlyStorage, Storage};

pub use report::{Area, Finding, Status, VerifyReport};
pub use usage::{DiskUsage, disk_usage};

/// Checks every checksum of the database in `dir` on `storage` and says
/// what is damaged and where. Writes nothing. Takes the directory lock
/// (`Locked` if an engine has it open), and refuses a directory holding no
/// database (`NoDatabase`).
///
/// ```
/// use std::sync::Arc;
/// use actum::engine::{Engine, EngineOptions};
/// use actum::storage::FsStorage;
///
/// let dir = tempfile::tempdir()?;
/// Engine::open(dir.path(), EngineOptions::default())?.close()?;
/// let report = actum::verify::verify_dir(Arc::new(FsStorage::new()), dir.path())?;
/// assert!(!report.damaged(), "{:?}", report.findings);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_dir(storage: Arc<dyn Storage>, dir: &Path) -> Result<VerifyReport> {
    require_database(storage.as_ref(), dir)?;
    let view: Arc<dyn Storage> = Arc::new(ReadOnlyStorage::new(Arc::clone(&storage)));
    let _lock = view.lock_dir(dir).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock => Error::Locked {
            dir: dir.to_path_buf(),
        },
        _ => Error::io("lock database directory", dir, e),
    })?;
    let mut report = VerifyReport {
        dir: dir.to_path_buf(),
        ..VerifyReport::default()
    };
    let manifest = manifest::check(&view, dir, &mut report)?;
    let durable = match &manifest {
        Some(manifest) => wal::check((storage.as_ref(), &view), dir, manifest, &mut report)?,
        None => {
            let what = "not checked: without a valid manifest the database id and the oldest \
                        live segment are unknown";
            let at = (dir.join(crate::db::WAL_DIR), None);
            report.push(report::Area::Wal, report::Status::Note, at, what);
            None
        }
    };
    state::check(&view, dir, manifest.as_ref(), durable, &mut report)?;
    assert!(
        !report.findings.is_empty(),
        "a verify reports what it checked"
    );
    Ok(report)
}
