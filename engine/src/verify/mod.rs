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
use crate::ids::Lsn;
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
    check_dir(storage, dir).map(|(report, _)| report)
}

/// [`verify_dir`] for a database another engine has open and keeps
/// writing: the checks run on a consistent copy, taken as
/// [`crate::engine::Engine::open_snapshot`] takes it (no lock, no byte
/// changed, taken again if a checkpoint changed the files under it), and
/// the report's `snapshot_lsn` says which LSN the copy of the log ended at.
/// What the copy leaves out is not checked: spare segments below the
/// oldest live one and files being prepared (a `.tmp`), which hold no
/// record the database needs. Damage found is checked again on a fresh
/// copy before it is reported, since a copy read mid-write can look torn.
///
/// ```
/// use std::sync::Arc;
/// use actum::books::{CreateRun, RunId, digest_of};
/// use actum::engine::{Engine, EngineOptions};
/// use actum::storage::FsStorage;
///
/// let dir = tempfile::tempdir()?;
/// let writer = Engine::open(dir.path(), EngineOptions::default())?;
/// writer.create_run(CreateRun { run: RunId::new("r")?, input_digest: digest_of(b"r"),
///     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
/// let report = actum::verify::verify_snapshot(Arc::new(FsStorage::new()), dir.path())?;
/// assert!(!report.damaged(), "{:?}", report.findings);
/// assert_eq!(report.snapshot_lsn, Some(writer.durable_lsn()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn verify_snapshot(storage: Arc<dyn Storage>, dir: &Path) -> Result<VerifyReport> {
    crate::engine::with_copy(storage.as_ref(), dir, |copy, last| {
        let (mut report, durable) = check_dir(Arc::new(copy), dir)?;
        if report.damaged() && !last {
            let first = report.damage().next().map(|f| f.what.clone());
            return Err(Error::Inconsistent {
                what: format!("damage in a copy of a live database: {first:?}"),
            });
        }
        report.snapshot_lsn = durable;
        Ok(report)
    })
}

/// The checks of [`verify_dir`], and the LSN the log was recovered to.
fn check_dir(storage: Arc<dyn Storage>, dir: &Path) -> Result<(VerifyReport, Option<Lsn>)> {
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
    Ok((report, durable))
}
