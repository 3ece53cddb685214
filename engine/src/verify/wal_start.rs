//! The one damage WAL recovery lets pass as a torn tail: the very first
//! record of the log. Recovery learns where acknowledged records end from
//! the records it has read; when the first one is unreadable it has read
//! none, so it cuts the log there, and the records behind it (all covered
//! by the state checkpoint, so no acknowledged command is lost) are
//! dropped. A verify looks behind such a cut for records the checkpoint
//! covers: intact ones, or the first record's own header, are proof that
//! acknowledged log records were damaged.
//!
//! **Invariant:** this reads the files as they are on the disk (not the
//! read-only view, where recovery's cut already removed them), and writes
//! nothing.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::ids::{Lsn, SegmentId};
use crate::manifest::Manifest;
use crate::storage::{OpenMode, Storage};
use crate::wal::format::{
    GROUP_ALIGN_BYTES, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, decode_record_header,
    parse_segment_file_name, payload_matches, record_seed, segment_path,
};

/// What lies behind a cut at the start of the log.
pub(super) struct Behind {
    /// The file and offset of the proof.
    pub(super) file: PathBuf,
    /// Its byte offset.
    pub(super) offset: u64,
    /// What it proves.
    pub(super) what: String,
}

/// Looks behind a cut at the start of the first live segment of
/// `wal_dir`, on `raw` storage, for records the checkpoint covers.
pub(super) fn damage_behind_start(
    raw: &dyn Storage,
    wal_dir: &Path,
    manifest: &Manifest,
) -> Result<Option<Behind>> {
    let covered = manifest.applied_lsn;
    if covered == Lsn::ZERO {
        return Ok(None);
    }
    let names = raw
        .list_dir(wal_dir)
        .map_err(|e| Error::io("list WAL directory", wal_dir, e))?;
    let mut ids: Vec<SegmentId> = names
        .iter()
        .filter_map(|n| parse_segment_file_name(n))
        .filter(|&id| id >= manifest.first_live_segment)
        .collect();
    ids.sort_unstable();
    for id in ids {
        if let Some(found) = scan_segment(raw, wal_dir, manifest, id)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The first record the checkpoint covers found in segment `id`, at its
/// start (even with a damaged payload) or at a group boundary (intact).
fn scan_segment(
    raw: &dyn Storage,
    wal_dir: &Path,
    manifest: &Manifest,
    id: SegmentId,
) -> Result<Option<Behind>> {
    let path = segment_path(wal_dir, id);
    let file = match raw.open(&path, OpenMode::Existing) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open segment", &path, e)),
    };
    let len = file
        .len()
        .map_err(|e| Error::io("stat segment", &path, e))?;
    let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
    file.read_at(0, &mut bytes)
        .map_err(|e| Error::io("read segment", &path, e))?;
    let seed = record_seed(manifest.database_id, id);
    let covered = manifest.applied_lsn;
    let mut offset = SEGMENT_HEADER_BYTES;
    // Bounded by the segment's length, one group boundary at a time.
    while offset + RECORD_HEADER_BYTES as u64 <= len {
        let at = usize::try_from(offset).unwrap_or(usize::MAX);
        if let Some(header) = bytes.get(at..).and_then(|b| decode_record_header(b, seed))
            && header.lsn <= covered
        {
            let from = at + RECORD_HEADER_BYTES;
            let payload = from
                .checked_add(header.len as usize)
                .and_then(|to| bytes.get(from..to));
            let intact = payload.is_some_and(|p| payload_matches(&header, seed, p));
            let start = offset == SEGMENT_HEADER_BYTES && id == manifest.first_live_segment;
            if intact || start {
                let what = if intact {
                    format!(
                        "the log's first record cannot be read, yet an intact {} that the \
                         checkpoint covers ({covered}) lies behind it at byte {offset}: \
                         acknowledged log records are damaged (the state store holds their \
                         effects, so an open drops them as a torn tail)",
                        header.lsn
                    )
                } else {
                    format!(
                        "{} at the start of the log fails its payload checksum, and the \
                         checkpoint covers it ({covered}): an acknowledged record is damaged \
                         (the state store holds its effects, so an open drops it as a torn \
                         tail)",
                        header.lsn
                    )
                };
                let first = segment_path(wal_dir, manifest.first_live_segment);
                return Ok(Some(Behind {
                    file: first,
                    offset: SEGMENT_HEADER_BYTES,
                    what,
                }));
            }
        }
        offset += GROUP_ALIGN_BYTES;
    }
    Ok(None)
}
