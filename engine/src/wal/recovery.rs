//! Recovery: make every segment durable, validate headers, scan records,
//! and tell a torn tail (truncate) from damaged acknowledged data (refuse).
//!
//! **Invariant:** recovery never accepts a record out of LSN order, and
//! never truncates a record that was acknowledged as far as the log can
//! tell: a damaged record is acknowledged if its LSN is covered by the
//! checkpoint or if any later valid record carries an ack watermark at or
//! above it. Such damage is `Error::Corrupt` unless `repair` is set.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{self, SEGMENT_HEADER_BYTES, SegmentHeader};
use super::segment::{self, SegmentFile};
use super::table::LiveSegment;
use super::{RecoveryReport, WalOptions};
use crate::error::{Error, Result};
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::planted::{PlantedBug, planted};
use crate::storage::Storage;

/// What recovery hands to the log.
#[derive(Debug)]
pub struct Recovered {
    /// The report for the caller.
    pub report: RecoveryReport,
    /// Live segments, oldest first; the last is the active one.
    pub live: Vec<LiveSegment>,
    /// The active segment.
    pub active: SegmentFile,
    /// Where the next record goes in `active`.
    pub offset: u64,
    /// An empty, valid segment after the active one, kept for reuse.
    pub prepared: Option<SegmentFile>,
}

struct Seg {
    file: SegmentFile,
    header: SegmentHeader,
    first_record: Option<Lsn>,
}

/// Where scanning stopped: the first byte not accepted.
struct Stop {
    index: usize,
    offset: usize,
    truncate_at: usize,
    damaged_lsn: Lsn,
}

/// Lists, cleans up, syncs and opens the segments from `first_segment` on.
fn open_segments(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    database: DatabaseId,
    first_segment: SegmentId,
) -> Result<Vec<Seg>> {
    let names = storage
        .list_dir(dir)
        .map_err(|e| Error::io("list wal directory", dir, e))?;
    let mut ids = Vec::new();
    for name in &names {
        let stale = match format::parse_segment_file_name(name) {
            Some(id) if id >= first_segment => {
                ids.push(id);
                false
            }
            Some(_) => true,
            None => name.ends_with(".wal.tmp"),
        };
        if stale {
            let path = dir.join(name);
            storage
                .remove_file(&path)
                .map_err(|e| Error::io("remove leftover segment", &path, e))?;
        }
    }
    let Some(&lowest) = ids.first() else {
        let path = format::segment_path(dir, first_segment);
        return Err(Error::corrupt(path, 0, "the log has no live segment file"));
    };
    let mut segs = Vec::with_capacity(ids.len());
    for (k, &id) in ids.iter().enumerate() {
        let expected = SegmentId(lowest.0 + k as u64);
        if id != expected {
            let path = format::segment_path(dir, expected);
            return Err(Error::corrupt(path, 0, "segment missing: gap in the log"));
        }
        let (file, header) = segment::open(storage, dir, database, id)?;
        // A previous process may have died with these bytes only in the
        // page cache: make them durable before trusting them.
        file.file
            .sync_data()
            .map_err(|e| Error::io("sync segment before recovery", &file.path, e))?;
        segs.push(Seg {
            file,
            header,
            first_record: None,
        });
    }
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("sync wal directory", dir, e))?;
    assert_eq!(segs.len(), ids.len());
    Ok(segs)
}

/// Scans forward from the first segment; returns where valid data stops.
fn scan(segs: &mut [Seg], covered: Lsn, options: &WalOptions) -> Result<(Stop, Option<Lsn>)> {
    let verify_payload = !planted(options, PlantedBug::AcceptBadChecksum);
    let mut expected: Option<Lsn> = None;
    let mut last_complete: Option<Lsn> = None;
    let mut batch_start: Option<(usize, usize, Lsn)> = None;
    let mut bytes = segs[0].file.read_all()?;
    for index in 0..segs.len() {
        let seg = &segs[index];
        if let Some(next) = expected
            && seg.header.first_lsn > next
        {
            let reason = format!("header first LSN {} is past {next}", seg.header.first_lsn);
            return Err(Error::corrupt(&seg.file.path, 0, reason));
        }
        let seed = seg.file.seed;
        let mut offset = SEGMENT_HEADER_BYTES as usize;
        let mut first_record = None;
        // Bounded by the segment size: each step advances by a record.
        while let Some((header, _)) = segment::record_checked(&bytes, seed, offset, verify_payload)
        {
            let in_order = match expected {
                Some(next) => header.lsn == next,
                None => header.lsn >= seg.header.first_lsn,
            };
            if !in_order {
                break;
            }
            first_record.get_or_insert(header.lsn);
            batch_start.get_or_insert((index, offset, header.lsn));
            offset += usize::try_from(header.total_bytes()).expect("record fits a segment");
            expected = Some(header.lsn.next());
            if !header.more() {
                last_complete = Some(header.lsn);
                batch_start = None;
            }
        }
        segs[index].first_record = first_record;
        let next_bytes = match segs.get(index + 1) {
            Some(next) if batch_start.is_none() => Some(next.file.read_all()?),
            _ => None,
        };
        let continues = next_bytes.as_ref().is_some_and(|next_bytes| {
            let next = &segs[index + 1];
            let at = SEGMENT_HEADER_BYTES as usize;
            segment::record_at(next_bytes, next.file.seed, at).is_some_and(|(h, _)| {
                expected.map_or(h.lsn >= next.header.first_lsn, |e| h.lsn == e)
            })
        });
        if !continues {
            let (truncate_index, truncate_at, damaged_lsn) = match batch_start {
                Some(start) => start,
                None => (index, offset, expected.unwrap_or(covered.next())),
            };
            assert!(truncate_index <= index);
            // A batch never spans segments, so an open batch is in `index`.
            assert_eq!(truncate_index, index, "an open batch lies in one segment");
            let stop = Stop {
                index,
                offset,
                truncate_at,
                damaged_lsn,
            };
            return Ok((stop, last_complete));
        }
        bytes = next_bytes.expect("a continuing segment was read");
    }
    // The last segment has no successor, so the loop always returns.
    Err(Error::corrupt(
        &segs[0].file.path,
        0,
        "recovery scan found no end",
    ))
}

/// The highest (LSN, ack) among valid records with LSN >= `min_lsn` after
/// the stop point, in its segment and every later one.
fn later_evidence(segs: &[Seg], stop: &Stop) -> Result<Option<(Lsn, Lsn)>> {
    let mut best: Option<(Lsn, Lsn)> = None;
    for (index, seg) in segs.iter().enumerate().skip(stop.index) {
        let bytes = seg.file.read_all()?;
        let from = if index == stop.index {
            // Skip by the damaged record's length when its header is intact.
            format::decode_record_header(&bytes[stop.offset..], seg.file.seed)
                .map_or(stop.offset + 1, |h| stop.offset + h.total_bytes() as usize)
        } else {
            SEGMENT_HEADER_BYTES as usize
        };
        if let Some(found) = segment::max_ack_after(&bytes, seg.file.seed, from, stop.damaged_lsn) {
            best = Some(best.map_or(found, |b| (b.0.max(found.0), b.1.max(found.1))));
        }
    }
    Ok(best)
}

/// Runs recovery over the log in `dir`.
pub fn recover(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    database: DatabaseId,
    options: &WalOptions,
    first_segment: SegmentId,
    covered: Lsn,
) -> Result<Recovered> {
    let mut segs = open_segments(storage, dir, database, first_segment)?;
    let segments_scanned = segs.len() as u64;
    let (stop, last_complete) = scan(&mut segs, covered, options)?;
    let evidence = later_evidence(&segs, &stop)?;
    let acked_by_later = evidence.is_some_and(|(_, ack)| ack >= stop.damaged_lsn);
    let stop_path = segs[stop.index].file.path.clone();
    let damage_is_corruption = (stop.damaged_lsn <= covered || acked_by_later)
        && !planted(options, PlantedBug::CorruptionAsTornTail);
    if damage_is_corruption && !options.repair {
        let reason = format!(
            "{} cannot be read, yet it was acknowledged ({}); the damage is not a torn tail",
            stop.damaged_lsn,
            match evidence {
                Some((lsn, ack)) if ack >= stop.damaged_lsn =>
                    format!("a later record, {lsn}, carries ack watermark {}", ack.0),
                _ => format!("the checkpoint covers up to {}", covered.0),
            }
        );
        return Err(Error::corrupt(stop_path, stop.offset as u64, reason));
    }
    let first_found = segs.iter().find_map(|s| s.first_record);
    if let Some(first) = first_found
        && first > covered.next()
    {
        let path = segs[0].file.path.clone();
        let reason = format!("the log starts at {first} but the checkpoint covers only {covered}");
        return Err(Error::corrupt(path, SEGMENT_HEADER_BYTES, reason));
    }
    let last_lsn = last_complete.unwrap_or(covered);
    if last_lsn < covered {
        let reason = format!("the log ends at {last_lsn}, before the checkpoint's {covered}");
        return Err(Error::corrupt(stop_path, stop.offset as u64, reason));
    }
    let mut report = RecoveryReport {
        last_lsn,
        segments_scanned,
        truncated_bytes: 0,
        truncated_at: None,
        repair_dropped: None,
    };
    cut_tail(storage, dir, &mut segs, &stop, last_lsn, &mut report)?;
    if stop.damaged_lsn <= covered || acked_by_later {
        let highest = evidence.map_or(stop.damaged_lsn, |(lsn, _)| lsn.max(stop.damaged_lsn));
        report.repair_dropped = Some(format!(
            "{} from byte offset {} on, and every later segment: {} ..= lsn {}",
            stop_path.display(),
            stop.truncate_at,
            stop.damaged_lsn,
            highest.0
        ));
    }
    finish(segs, &stop, last_lsn, report)
}

/// Zeroes the tail of the stop segment and removes later segments holding
/// data; keeps an empty next segment as prepared.
fn cut_tail(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    segs: &mut Vec<Seg>,
    stop: &Stop,
    last_lsn: Lsn,
    report: &mut RecoveryReport,
) -> Result<()> {
    let seg = &segs[stop.index];
    let bytes = seg.file.read_all()?;
    let end = segment::written_end(&bytes);
    if end > stop.truncate_at {
        let zeros = vec![0u8; end - stop.truncate_at];
        seg.file
            .file
            .write_at(stop.truncate_at as u64, &zeros)
            .map_err(|e| Error::io("truncate torn wal tail", &seg.file.path, e))?;
        seg.file
            .file
            .sync_data()
            .map_err(|e| Error::io("sync truncated segment", &seg.file.path, e))?;
        report.truncated_bytes += zeros.len() as u64;
    }
    let mut removed = false;
    // Newest first, so a crash mid-way never leaves a gap.
    while segs.len() > stop.index + 1 {
        let last = segs.last().expect("non-empty");
        let bytes = last.file.read_all()?;
        let data = segment::written_end(&bytes[SEGMENT_HEADER_BYTES as usize..]) as u64;
        if data == 0 && segs.len() == stop.index + 2 && last.header.first_lsn <= last_lsn.next() {
            break; // An empty prepared segment: keep it.
        }
        storage
            .remove_file(&last.file.path)
            .map_err(|e| Error::io("remove segment after torn tail", &last.file.path, e))?;
        report.truncated_bytes += data;
        removed = true;
        segs.pop();
    }
    if removed {
        storage
            .sync_dir(dir)
            .map_err(|e| Error::io("sync wal directory", dir, e))?;
    }
    if report.truncated_bytes > 0 {
        let path: PathBuf = segs[stop.index].file.path.clone();
        report.truncated_at = Some((path, stop.truncate_at as u64));
    }
    assert!(segs.len() <= stop.index + 2);
    Ok(())
}

/// Builds the live table and the writer position.
fn finish(
    mut segs: Vec<Seg>,
    stop: &Stop,
    last_lsn: Lsn,
    report: RecoveryReport,
) -> Result<Recovered> {
    let prepared = if segs.len() > stop.index + 1 {
        segs.pop().map(|s| s.file)
    } else {
        None
    };
    assert_eq!(segs.len(), stop.index + 1);
    // Each segment's first LSN; an empty one takes its successor's.
    let mut next_first = last_lsn.next();
    let mut live: Vec<LiveSegment> = segs
        .iter()
        .rev()
        .map(|seg| {
            let first = match seg.first_record {
                Some(lsn) if lsn < next_first => lsn,
                _ => next_first,
            };
            next_first = first;
            LiveSegment {
                id: seg.file.id,
                first_lsn: first,
            }
        })
        .collect();
    live.reverse();
    let active = segs.pop().expect("the stop segment").file;
    assert_eq!(live.last().map(|s| s.id), Some(active.id));
    Ok(Recovered {
        report,
        live,
        active,
        offset: stop.truncate_at as u64,
        prepared,
    })
}
