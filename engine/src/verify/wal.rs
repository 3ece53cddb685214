//! The WAL's share of a verify: recovery run on the read-only view (every
//! segment header; both checksums of every record along the chain; a torn
//! tail told from damage to acknowledged records by the ack watermarks and
//! the checkpoint), the manifest's claims held against the log's end, then
//! every record read again and its payload decoded as books ops.
//!
//! **Invariant:** a torn tail beyond every acknowledged record is a note
//! (recovery cuts it, nothing acknowledged is lost); damage to an
//! acknowledged record, or a payload that does not decode, is damage at
//! its segment file and byte offset.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::report::{Area, Status, VerifyReport};
use super::wal_start::damage_behind_start;
use crate::books::{decode_ops, unsupported_payload_version};
use crate::db::WAL_DIR;
use crate::engine::EngineOptions;
use crate::error::{Error, Result};
use crate::ids::Lsn;
use crate::manifest::Manifest;
use crate::storage::Storage;
use crate::wal::format::{SEGMENT_HEADER_BYTES, segment_path};
use crate::wal::{FIRST_EPOCH, LogRoot, Wal, WalIter};

/// Checks the log of `dir` as `manifest` describes it, recovering it on
/// the read-only view `storage` (`raw` is the disk under it); returns the
/// log's durable end if recovery accepted it.
pub(super) fn check(
    (raw, storage): (&dyn Storage, &Arc<dyn Storage>),
    dir: &Path,
    manifest: &Manifest,
    report: &mut VerifyReport,
) -> Result<Option<Lsn>> {
    let wal_dir = dir.join(WAL_DIR);
    // As an open would: the epoch only matters to appends, which a verify
    // never makes.
    let epoch = manifest.sequence.max(FIRST_EPOCH) + 1;
    let opened = Wal::open(
        Arc::clone(storage),
        &wal_dir,
        manifest.database_id,
        EngineOptions::default().db.wal,
        LogRoot {
            first_segment: manifest.first_live_segment,
            covered: manifest.applied_lsn,
            // A verify looks at every group boundary, clean or not.
            clean_end: None,
        },
        epoch,
    );
    let (wal, recovery) = match opened {
        Ok(opened) => opened,
        Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            let what = format!("the WAL directory or a segment in it is missing ({source})");
            report.push(Area::Wal, Status::Damaged, (wal_dir, None), what);
            return Ok(None);
        }
        Err(e @ Error::Io { .. }) => return Err(e),
        Err(e) => {
            report.damaged_by(Area::Wal, wal_dir, &e);
            return Ok(None);
        }
    };
    let start_cut = recovery
        .truncated_at
        .as_ref()
        .is_some_and(|(file, offset)| {
            *offset == SEGMENT_HEADER_BYTES
                && *file == segment_path(&wal_dir, manifest.first_live_segment)
        });
    if start_cut && let Some(behind) = damage_behind_start(raw, &wal_dir, manifest)? {
        let at = (behind.file, Some(behind.offset));
        report.push(Area::Wal, Status::Damaged, at, behind.what);
    } else if let Some((file, offset)) = recovery.truncated_at.clone() {
        let what = format!(
            "a torn tail of {} bytes after {}: never acknowledged, so an open cuts it here \
             (recovery's normal work after a crash, not damage)",
            recovery.truncated_bytes, recovery.last_lsn
        );
        report.push(Area::Wal, Status::Note, (file, Some(offset)), what);
    }
    let durable = wal.durable_lsn();
    if !log_covers_manifest(manifest, durable, &wal_dir, report) {
        return Ok(Some(durable));
    }
    let checked = read_every_record(&wal, &wal_dir, report)?;
    report.wal_records_checked = checked;
    if !report.damage().any(|f| f.area == Area::Wal) {
        let what = format!(
            "{} segment(s) scanned, {checked} record(s) read back to {durable} with both \
             checksums and their payload decoded; the state checkpoint covers {}",
            recovery.segments_scanned, manifest.applied_lsn
        );
        report.push(Area::Wal, Status::Intact, (wal_dir, None), what);
    }
    Ok(Some(durable))
}

/// The log must reach what the manifest says was acknowledged: its clean
/// shutdown LSN and its checkpoint. False (and damage reported) if not.
fn log_covers_manifest(
    manifest: &Manifest,
    durable: Lsn,
    wal_dir: &Path,
    report: &mut VerifyReport,
) -> bool {
    let mut fine = true;
    if let Some(clean) = manifest.clean_shutdown_lsn.filter(|&clean| durable < clean) {
        let what = format!(
            "the database was closed cleanly at {clean}, every record up to it acknowledged, \
             but the log now ends at {durable}: its tail is damaged"
        );
        report.push(
            Area::Wal,
            Status::Damaged,
            (wal_dir.to_path_buf(), None),
            what,
        );
        fine = false;
    }
    if durable < manifest.applied_lsn {
        let what = format!(
            "the manifest says the state covers {} but the log ends at {durable}: \
             acknowledged records are missing",
            manifest.applied_lsn
        );
        report.push(
            Area::Wal,
            Status::Damaged,
            (wal_dir.to_path_buf(), None),
            what,
        );
        fine = false;
    }
    fine
}

/// Reads every record the log holds and decodes its payload; reports the
/// first that fails; returns how many were read.
fn read_every_record(wal: &Wal, wal_dir: &Path, report: &mut VerifyReport) -> Result<u64> {
    let mut records = wal.read_from(Lsn::ZERO)?;
    let mut checked = 0u64;
    // Bounded by the log's durable end: the iterator stops there.
    while let Some(record) = records.next() {
        let (lsn, payload) = match record {
            Ok(record) => record,
            Err(e) => {
                report.damaged_by(Area::Wal, wal_dir.to_path_buf(), &e);
                return Ok(checked);
            }
        };
        if let Some(problem) = payload_problem(lsn, &payload) {
            let (file, offset) = position(&records, wal_dir);
            report.push(Area::Wal, Status::Damaged, (file, offset), problem);
            return Ok(checked);
        }
        checked += 1;
    }
    Ok(checked)
}

/// Why the payload of the record at `lsn` does not replay, if it does not.
fn payload_problem(lsn: Lsn, payload: &[u8]) -> Option<String> {
    if let Some(found) = unsupported_payload_version(payload) {
        return Some(format!(
            "the record at {lsn} is intact but has payload version {found}, which this build \
             does not read: another build wrote it"
        ));
    }
    match decode_ops(payload) {
        Ok(ops) if ops.is_empty() => Some(format!("the record at {lsn} holds no ops")),
        Ok(_) => None,
        Err(e) => Some(format!(
            "the record at {lsn} passes its checksums but is not a list of books ops: {e}"
        )),
    }
}

/// The segment file and offset of the record `records` returned last.
fn position(records: &WalIter, wal_dir: &Path) -> (PathBuf, Option<u64>) {
    match records.position() {
        Some((file, offset)) => (file.to_path_buf(), Some(offset)),
        None => (wal_dir.to_path_buf(), None),
    }
}
