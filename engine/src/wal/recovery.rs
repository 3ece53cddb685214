//! Recovery: make every segment durable, validate headers, scan records,
//! and tell a torn tail (truncate) from damaged acknowledged data (refuse).
//!
//! The scan follows the log's chain: a record is followed by the next one
//! right after it, or at the next group boundary if it ended a write (or,
//! after a torn write, where a later writer, with a higher epoch, started
//! its first write). Segments are read in bounded chunks, from the first
//! live segment to where the chain stops, then every group boundary after
//! the stop is checked for a later write whose ack watermark proves the
//! damage acknowledged: the work is the records since the oldest live
//! segment plus one pass over the rest of the segments, never the history.
//!
//! **Invariant:** recovery never accepts a record out of LSN order or with
//! an epoch below its predecessor's, and never truncates a record that was
//! acknowledged as far as the log can tell: a damaged record is
//! acknowledged if its LSN is covered by the checkpoint or if any later
//! write carries an ack watermark at or above it. Such damage is
//! `Error::Corrupt` unless `repair` is set. After recovery no record of the
//! dropped tail can be read as part of the log: the next writer's epoch is
//! higher, and a torn write's first record, where the next write will not
//! overwrite it, is zeroed.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{self, RECORD_HEADER_BYTES, RecordHeader, SEGMENT_HEADER_BYTES, SegmentHeader};
use super::segment::{self, SegmentFile};
use super::table::{LiveSegment, SPARES_MAX};
use super::{RecoveryReport, WalOptions};
use crate::error::{Error, Result};
use crate::ids::{DatabaseId, Lsn, SegmentId};
use crate::planted::{PlantedBug, planted};
use crate::storage::Storage;

/// How much of a segment recovery reads at a time, at most.
const READ_CHUNK_BYTES: u64 = 1 << 20;

/// How much of a segment recovery reads first: each later read of the same
/// segment reads twice as much, up to `READ_CHUNK_BYTES`. A look at a
/// segment's first record slot (the prepared segment after the active one)
/// reads this much, not a megabyte, and a short log little more.
const FIRST_READ_BYTES: u64 = 16 << 10;

/// What the manifest says about the log recovery opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogRoot {
    /// The oldest live segment.
    pub first_segment: SegmentId,
    /// The LSN a durable state checkpoint covers.
    pub covered: Lsn,
    /// The clean-shutdown LSN of a manifest that is known to be the newest
    /// one ever made durable (both copies valid, so no newer copy was lost
    /// to damage); `None` otherwise, or to always look for later writes.
    pub clean_end: Option<Lsn>,
}

/// What recovery hands to the log.
#[derive(Debug)]
pub struct Recovered {
    /// The report for the caller.
    pub report: RecoveryReport,
    /// Live segments, oldest first; the last is the active one.
    pub live: Vec<LiveSegment>,
    /// The active segment.
    pub active: SegmentFile,
    /// Where the last record of the log ends in `active` (the next write
    /// starts at the group boundary at or after it).
    pub offset: u64,
    /// An empty, valid segment after the active one, kept for reuse.
    pub prepared: Option<SegmentFile>,
    /// The live segments (and the WAL directory) were not synced: the
    /// writer syncs them before its first write.
    pub syncs_deferred: bool,
    /// Old segment files below the first live one (at most `SPARES_MAX`,
    /// the highest numbered), kept to be recycled; the others were removed.
    pub spares: Vec<PathBuf>,
}

struct Seg {
    file: SegmentFile,
    header: SegmentHeader,
    first_record: Option<Lsn>,
}

/// Where scanning stopped: the first byte not accepted.
struct Stop {
    index: usize,
    offset: u64,
    truncate_at: u64,
    damaged_lsn: Lsn,
}

/// A segment's bytes, read on demand in bounded chunks, each read twice
/// the size of the one before (from `FIRST_READ_BYTES` to
/// `READ_CHUNK_BYTES`).
struct Window<'a> {
    file: &'a SegmentFile,
    chunk: Vec<u8>,
    chunk_at: u64,
    /// The size of the next read (a record longer than it is read whole).
    next_read: u64,
}

impl<'a> Window<'a> {
    fn new(file: &'a SegmentFile) -> Window<'a> {
        Window {
            file,
            chunk: Vec::new(),
            chunk_at: 0,
            next_read: FIRST_READ_BYTES,
        }
    }

    /// The `len` bytes at `offset`; `None` if they run past the segment.
    fn bytes(&mut self, offset: u64, len: u64) -> Result<Option<&[u8]>> {
        let Some(end) = offset
            .checked_add(len)
            .filter(|&e| e <= self.file.size_bytes)
        else {
            return Ok(None);
        };
        let chunk_end = self.chunk_at + self.chunk.len() as u64;
        if offset < self.chunk_at || end > chunk_end {
            let want = len.max(self.next_read).min(self.file.size_bytes - offset);
            self.next_read = (self.next_read * 2).min(READ_CHUNK_BYTES);
            self.chunk
                .resize(usize::try_from(want).expect("a chunk fits in memory"), 0);
            self.file
                .file
                .read_at(offset, &mut self.chunk)
                .map_err(|e| Error::io("read segment", &self.file.path, e))?;
            self.chunk_at = offset;
        }
        let from = usize::try_from(offset - self.chunk_at).expect("in chunk");
        let to = from + usize::try_from(len).expect("in chunk");
        Ok(Some(&self.chunk[from..to]))
    }

    /// The header of the valid record at `offset` (both checksums, unless
    /// `verify_payload` is off), if there is one.
    fn record(&mut self, offset: u64, verify_payload: bool) -> Result<Option<RecordHeader>> {
        let seed = self.file.seed;
        let Some(raw) = self.bytes(offset, RECORD_HEADER_BYTES as u64)? else {
            return Ok(None);
        };
        let Some(header) = format::decode_record_header(raw, seed) else {
            return Ok(None);
        };
        let at = offset + RECORD_HEADER_BYTES as u64;
        let Some(payload) = self.bytes(at, u64::from(header.len))? else {
            return Ok(None);
        };
        let valid = !verify_payload || format::payload_matches(&header, seed, payload);
        Ok(valid.then_some(header))
    }
}

/// Lists, cleans up, syncs and opens the segments from `first_segment` on;
/// returns them and the old segment files kept as spares.
fn open_segments(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    database: DatabaseId,
    first_segment: SegmentId,
) -> Result<(Vec<Seg>, Vec<PathBuf>)> {
    let names = storage
        .list_dir(dir)
        .map_err(|e| Error::io("list wal directory", dir, e))?;
    let mut ids = Vec::new();
    let mut old = Vec::new();
    let mut stale = Vec::new();
    for name in &names {
        match format::parse_segment_file_name(name) {
            Some(id) if id >= first_segment => ids.push(id),
            Some(id) => old.push(id),
            None if name.ends_with(".wal.tmp") => stale.push(dir.join(name)),
            None => {}
        }
    }
    // Segments below the first live one are covered by the checkpoint:
    // spares left by garbage collection (or an interrupted one). Keep the
    // newest few for reuse, whatever they hold: their records' checksums
    // are seeded with their own numbers, so they never read as live ones.
    old.sort_unstable();
    let mut spares: Vec<PathBuf> = old
        .iter()
        .map(|&id| format::segment_path(dir, id))
        .collect();
    stale.extend(spares.drain(..old.len().saturating_sub(SPARES_MAX)));
    for path in &stale {
        storage
            .remove_file(path)
            .map_err(|e| Error::io("remove leftover segment", path, e))?;
    }
    let Some(&lowest) = ids.first() else {
        let path = format::segment_path(dir, first_segment);
        return Err(Error::corrupt(path, 0, "the log has no live segment file"));
    };
    // The manifest is synced before garbage collection removes or recycles
    // anything below its oldest live segment, so that segment outlives
    // every manifest that names it. Missing, its records are lost; so are
    // those of an older manifest copy chosen after the newer one was
    // damaged, whose oldest live segment a later checkpoint let go.
    if lowest != first_segment {
        let path = format::segment_path(dir, first_segment);
        let reason = format!(
            "the manifest names segment {} as the oldest live one, but it is missing \
             (the oldest present is {}): the records it held are lost",
            first_segment.0, lowest.0
        );
        return Err(Error::corrupt(path, 0, reason));
    }
    let mut segs = Vec::with_capacity(ids.len());
    for (k, &id) in ids.iter().enumerate() {
        let expected = SegmentId(lowest.0 + k as u64);
        if id != expected {
            let path = format::segment_path(dir, expected);
            return Err(Error::corrupt(path, 0, "segment missing: gap in the log"));
        }
        let (file, header) = segment::open(storage, dir, database, id)?;
        segs.push(Seg {
            file,
            header,
            first_record: None,
        });
    }
    assert_eq!(segs.len(), ids.len());
    Ok((segs, spares))
}

/// Makes every segment recovery read, and the WAL directory, durable:
/// **fsync: `sync_data`** of each, then **fsync: `sync_dir(wal/)`**. A
/// previous process may have died with their bytes only in the page cache,
/// and nothing may be built on bytes a power loss could still take away.
fn sync_segments(storage: &Arc<dyn Storage>, dir: &Path, segs: &[Seg]) -> Result<()> {
    for seg in segs {
        seg.file
            .file
            .sync_data()
            .map_err(|e| Error::io("sync segment before recovery", &seg.file.path, e))?;
    }
    storage
        .sync_dir(dir)
        .map_err(|e| Error::io("sync wal directory", dir, e))
}

/// The record that follows `header` (at `offset`) in the chain, if any:
/// right after it, or at the next group boundary if it ended a write or
/// if a later writer (a higher epoch) started there after a torn write.
fn successor(
    window: &mut Window<'_>,
    header: &RecordHeader,
    offset: u64,
    verify_payload: bool,
) -> Result<Option<(u64, RecordHeader)>> {
    let end = offset + header.total_bytes();
    let boundary = format::align_up(end);
    let follows = |h: &RecordHeader, later_writer: bool| {
        h.lsn == header.lsn.next()
            && if later_writer {
                h.epoch > header.epoch
            } else {
                h.epoch >= header.epoch
            }
    };
    if !header.group_end()
        && let Some(next) = window.record(end, verify_payload)?
        && follows(&next, false)
    {
        return Ok(Some((end, next)));
    }
    if header.group_end() || boundary != end {
        let later_writer = !header.group_end();
        if let Some(next) = window.record(boundary, verify_payload)?
            && follows(&next, later_writer)
        {
            return Ok(Some((boundary, next)));
        }
    }
    Ok(None)
}

/// Scans forward from the first segment; returns where valid data stops,
/// the last complete batch's LSN and the epoch of the last record read.
fn scan(segs: &mut [Seg], covered: Lsn, options: &WalOptions) -> Result<(Stop, Option<Lsn>)> {
    let mut last_complete: Option<Lsn> = None;
    let verify = !planted(options, PlantedBug::AcceptBadChecksum);
    let mut last: Option<RecordHeader> = None;
    // The last record that ended a batch.
    let mut complete: Option<RecordHeader> = None;
    let mut batch_start: Option<(usize, u64, Lsn)> = None;
    for index in 0..segs.len() {
        let seg = &segs[index];
        let expected = last.map(|h| h.lsn.next());
        if let Some(next) = expected
            && seg.header.first_lsn > next
        {
            let reason = format!("header first LSN {} is past {next}", seg.header.first_lsn);
            return Err(Error::corrupt(&seg.file.path, 0, reason));
        }
        let mut window = Window::new(&seg.file);
        let mut offset = SEGMENT_HEADER_BYTES;
        let mut current = match window.record(offset, verify)? {
            Some(h) if continues(&h, last.as_ref(), seg.header.first_lsn) => Some(h),
            _ => None,
        };
        let mut first_record = None;
        // Bounded by the segment size: each step advances by a record.
        while let Some(header) = current {
            first_record.get_or_insert(header.lsn);
            batch_start.get_or_insert((index, offset, header.lsn));
            if !header.more() {
                last_complete = Some(header.lsn);
                complete = Some(header);
                batch_start = None;
            }
            last = Some(header);
            match successor(&mut window, &header, offset, verify)? {
                Some((at, next)) => {
                    offset = at;
                    current = Some(next);
                }
                None => {
                    // Where the next record was due: right after this
                    // one, or at the boundary if it ended its write (the
                    // end of a segment cut short before the boundary).
                    offset = header.next_offset(offset).min(segs[index].file.size_bytes);
                    current = None;
                }
            }
        }
        segs[index].first_record = first_record;
        let next_first = match segs.get(index + 1) {
            Some(next) => Window::new(&next.file).record(SEGMENT_HEADER_BYTES, verify)?,
            None => None,
        };
        let next_continues = match (next_first, batch_start) {
            (Some(first), None) => {
                continues(&first, last.as_ref(), segs[index + 1].header.first_lsn)
            }
            // An unfinished batch that a later writer (after a recovery
            // dropped it) wrote again at the start of the next segment.
            (Some(first), Some((_, _, batch_lsn))) => {
                first.lsn == batch_lsn && last.is_some_and(|l| first.epoch > l.epoch)
            }
            (None, _) => false,
        };
        if next_continues && batch_start.is_some() {
            batch_start = None;
            last = complete;
        }
        if !next_continues {
            let expected = last.map(|h| h.lsn.next());
            let (truncate_index, truncate_at, damaged_lsn) = match batch_start {
                Some(start) => start,
                None => (index, offset, expected.unwrap_or(covered.next())),
            };
            // A batch never spans segments, so an open batch is in `index`.
            assert_eq!(truncate_index, index, "an open batch lies in one segment");
            assert!(truncate_at <= offset);
            let stop = Stop {
                index,
                offset,
                truncate_at,
                damaged_lsn,
            };
            return Ok((stop, last_complete));
        }
    }
    // The last segment has no successor, so the loop always returns.
    Err(Error::corrupt(
        &segs[0].file.path,
        0,
        "recovery scan found no end",
    ))
}

/// Whether `first`, the first record of a segment whose header promises
/// LSNs from `first_lsn`, continues the log after `last`.
fn continues(first: &RecordHeader, last: Option<&RecordHeader>, first_lsn: Lsn) -> bool {
    match last {
        Some(last) => first.lsn == last.lsn.next() && first.epoch >= last.epoch,
        None => first.lsn >= first_lsn,
    }
}

/// What the group boundaries after the stop hold.
#[derive(Default)]
struct After {
    /// The highest (LSN, ack) among valid records with LSN >= the damaged
    /// one.
    evidence: Option<(Lsn, Lsn)>,
    /// In the stop segment: the end of the furthest valid record found.
    stop_segment_end: Option<u64>,
    /// For each later segment: the end of its furthest valid record found.
    later_ends: Vec<Option<u64>>,
}

/// Looks at every group boundary after the stop, in its segment and every
/// later one, for valid records: a later write that acknowledges the
/// damaged LSN, and what a torn tail left.
fn look_after(segs: &[Seg], stop: &Stop, options: &WalOptions) -> Result<After> {
    let verify = !planted(options, PlantedBug::AcceptBadChecksum);
    let mut after = After::default();
    for (index, seg) in segs.iter().enumerate().skip(stop.index) {
        let mut window = Window::new(&seg.file);
        let mut at = if index == stop.index {
            format::align_up(stop.offset + 1)
        } else {
            SEGMENT_HEADER_BYTES
        };
        let mut furthest = None;
        // Bounded by the segment size, one group boundary at a time; a
        // write found there is followed to its last readable record.
        while at + RECORD_HEADER_BYTES as u64 <= seg.file.size_bytes {
            let mut found = window.record(at, verify)?.map(|h| (at, h));
            while let Some((offset, h)) = found {
                furthest = Some(offset + h.total_bytes());
                if h.lsn >= stop.damaged_lsn {
                    after.evidence = Some(after.evidence.map_or((h.lsn, h.ack), |(lsn, ack)| {
                        (lsn.max(h.lsn), ack.max(h.ack))
                    }));
                }
                let next = offset + h.total_bytes();
                found = match window.record(next, verify)? {
                    Some(n) if !h.group_end() && n.lsn == h.lsn.next() => Some((next, n)),
                    _ => None,
                };
            }
            at = format::align_up(furthest.unwrap_or(at).max(at + 1));
        }
        if index == stop.index {
            // A record at the stop whose header survived counts as dropped.
            let torn = window
                .bytes(stop.offset, RECORD_HEADER_BYTES as u64)?
                .and_then(|raw| format::decode_record_header(raw, seg.file.seed))
                .map(|h| (stop.offset + h.total_bytes()).min(seg.file.size_bytes));
            after.stop_segment_end = furthest.max(torn);
        } else {
            after.later_ends.push(furthest);
        }
    }
    Ok(after)
}

/// True if the chain stopped right after the complete batch ending at the
/// clean-shutdown LSN `root.clean_end`: the end a clean close left, with no
/// batch open and nothing the checkpoint covers missing.
fn clean_end_reached(stop: &Stop, last_complete: Option<Lsn>, root: LogRoot) -> bool {
    let Some(clean) = root.clean_end else {
        return false;
    };
    assert!(clean >= root.covered, "a clean shutdown covers the checkpoint");
    last_complete.unwrap_or(root.covered) == clean
        && stop.damaged_lsn == clean.next()
        && stop.truncate_at == stop.offset
        && stop.damaged_lsn > root.covered
}

/// [`look_after`] for a log known to end at a clean shutdown: no write can
/// follow the stop, so no evidence is looked for; a later segment is
/// reported as holding records if its first record slot holds a valid one.
fn look_at_later_starts(segs: &[Seg], stop: &Stop, options: &WalOptions) -> Result<After> {
    let verify = !planted(options, PlantedBug::AcceptBadChecksum);
    let mut after = After::default();
    for seg in segs.iter().skip(stop.index + 1) {
        let mut window = Window::new(&seg.file);
        let first = window.record(SEGMENT_HEADER_BYTES, verify)?;
        after
            .later_ends
            .push(first.map(|h| SEGMENT_HEADER_BYTES + h.total_bytes()));
    }
    assert_eq!(after.later_ends.len(), segs.len() - stop.index - 1);
    Ok(after)
}

/// Runs recovery over the log in `dir`.
pub fn recover(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    database: DatabaseId,
    options: &WalOptions,
    root: LogRoot,
    before_syncs: &mut dyn FnMut() -> Result<()>,
) -> Result<Recovered> {
    let LogRoot {
        first_segment,
        covered,
        ..
    } = root;
    let (mut segs, spares) = open_segments(storage, dir, database, first_segment)?;
    let segments_scanned = segs.len() as u64;
    let (stop, last_complete) = scan(&mut segs, covered, options)?;
    // After a clean close the log ends at the clean-shutdown LSN, and no
    // write follows it: an open makes a manifest update clearing the flag
    // durable before its first append, and that update would be the newest
    // copy (chosen, or rejected as damaged: then `clean_end` is `None`).
    // With no later write there is no ack watermark to find, so the pass
    // over every group boundary after the stop (a read of the rest of
    // every live segment) can find nothing; only the first record slot of
    // each later segment is looked at, to keep the removal of a later
    // segment holding records exactly as it is.
    let clean = clean_end_reached(&stop, last_complete, root);
    let after = if clean {
        look_at_later_starts(&segs, &stop, options)?
    } else {
        look_after(&segs, &stop, options)?
    };
    // A log that ends at its clean shutdown, with nothing after it, was
    // made durable by the process that closed it (or is a copy nothing has
    // built on yet): its segments are synced before the first append of
    // this open instead (`Recovered::syncs_deferred`), so an open that only
    // reads syncs none of them. Any other log is synced now, before
    // anything is cut, removed or appended.
    let syncs_deferred = clean && after.later_ends.iter().all(Option::is_none);
    if !syncs_deferred {
        // The caller's step first (the database makes the manifest copy
        // it read durable, if it had left that to the first append).
        before_syncs()?;
        sync_segments(storage, dir, &segs)?;
    }
    let evidence = after.evidence;
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
        return Err(Error::corrupt(stop_path, stop.offset, reason));
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
        return Err(Error::corrupt(stop_path, stop.offset, reason));
    }
    // The next writer appends `last_lsn + 1` into the stop segment, whose
    // header promises records from its first LSN on: a header past that
    // LSN was written after the records below it were durable, so they are
    // missing, and a record appended below the promise would be refused
    // by the next recovery (an acknowledged record lost).
    let promised = segs[stop.index].header.first_lsn;
    if promised > last_lsn.next() {
        let reason = format!(
            "the segment's header says its records start at {promised}, but the log before it \
             ends at {last_lsn}: the records between are missing"
        );
        return Err(Error::corrupt(stop_path, 0, reason));
    }
    let mut report = RecoveryReport {
        last_lsn,
        segments_scanned,
        truncated_bytes: 0,
        truncated_at: None,
        repair_dropped: None,
    };
    let drops_acknowledged = stop.damaged_lsn <= covered || acked_by_later;
    let zero_what_was_seen =
        drops_acknowledged && !planted(options, PlantedBug::RepairCutDoesNotLast);
    cut_tail(
        storage,
        dir,
        &mut segs,
        &stop,
        &after,
        (last_lsn, zero_what_was_seen),
        &mut report,
    )?;
    if drops_acknowledged {
        let highest = evidence.map_or(stop.damaged_lsn, |(lsn, _)| lsn.max(stop.damaged_lsn));
        report.repair_dropped = Some(format!(
            "{} from byte offset {} on, and every later segment: {} ..= lsn {}",
            stop_path.display(),
            stop.truncate_at,
            stop.damaged_lsn,
            highest.0
        ));
    }
    let mut found = finish(segs, &stop, last_lsn, report)?;
    found.spares = spares;
    found.syncs_deferred = syncs_deferred;
    // The writer fills a new segment up to the configured size, growing
    // its file as it goes: an empty next segment longer than that (made
    // under other options) is removed rather than handed to it. A shorter
    // one is a first step, or a grow a crash cut short: its length, synced
    // above, is all the writer takes as its space.
    if let Some(prepared) = found
        .prepared
        .take_if(|p| p.size_bytes > options.segment_size_bytes)
    {
        let path = prepared.path.clone();
        drop(prepared);
        storage
            .remove_file(&path)
            .map_err(|e| Error::io("remove odd-sized empty segment", &path, e))?;
    }
    Ok(found)
}

/// Makes the dropped tail unreadable as part of the log and removes later
/// segments holding records; keeps an empty next segment as prepared.
///
/// The next write starts at the group boundary at or after the truncation
/// point; a record of the dropped tail between the two would still follow
/// the last kept record, so those bytes are zeroed (at most one group
/// boundary's worth). Dropped records at or past the boundary carry an
/// older epoch than anything the next writer writes, so they never follow
/// its records.
fn cut_tail(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    segs: &mut Vec<Seg>,
    stop: &Stop,
    after: &After,
    (last_lsn, zero_what_was_seen): (Lsn, bool),
    report: &mut RecoveryReport,
) -> Result<()> {
    let seg = &segs[stop.index];
    // A torn tail ends at the next group boundary. A repair that drops
    // acknowledged records zeroes the rest of the stop segment instead
    // (later segments are removed below): left in place, the damaged
    // record and the records behind it (which recovery cannot always see:
    // a damaged header hides where its group goes on) would make the next
    // ordinary recovery call the same damage corruption again, so the cut
    // would last only until something was written over it.
    let seen_end = if zero_what_was_seen {
        seg.file.size_bytes
    } else {
        0
    };
    let boundary = format::align_up(stop.truncate_at.max(seen_end)).min(seg.file.size_bytes);
    if stop.truncate_at < boundary {
        let len = usize::try_from(boundary - stop.truncate_at).expect("within one segment");
        let mut gap = vec![0u8; len];
        seg.file
            .file
            .read_at(stop.truncate_at, &mut gap)
            .map_err(|e| Error::io("read torn wal tail", &seg.file.path, e))?;
        if gap.iter().any(|&b| b != 0) {
            gap.fill(0);
            seg.file
                .file
                .write_at(stop.truncate_at, &gap)
                .map_err(|e| Error::io("zero torn wal tail", &seg.file.path, e))?;
            seg.file
                .file
                .sync_data()
                .map_err(|e| Error::io("sync truncated segment", &seg.file.path, e))?;
        }
    }
    // What recovery drops that it could see: the valid records of an
    // unfinished batch, and valid records found after the stop.
    let seen_end = after.stop_segment_end.unwrap_or(0).max(stop.offset);
    report.truncated_bytes = seen_end - stop.truncate_at;
    let mut removed = false;
    // Newest first, so a crash mid-way never leaves a gap.
    while segs.len() > stop.index + 1 {
        let later = segs.len() - stop.index - 2;
        let holds = after.later_ends.get(later).copied().flatten();
        let last = segs.last().expect("non-empty");
        if holds.is_none()
            && segs.len() == stop.index + 2
            && last.header.first_lsn <= last_lsn.next()
        {
            break; // An empty prepared segment: keep it.
        }
        storage
            .remove_file(&last.file.path)
            .map_err(|e| Error::io("remove segment after torn tail", &last.file.path, e))?;
        report.truncated_bytes += holds.map_or(0, |end| end - SEGMENT_HEADER_BYTES);
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
        report.truncated_at = Some((path, stop.truncate_at));
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
        offset: stop.truncate_at,
        prepared,
        spares: Vec::new(),
        syncs_deferred: false,
    })
}
