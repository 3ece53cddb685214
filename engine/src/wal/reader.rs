//! `WalIter`: reads durable records in LSN order, segment by segment,
//! through a bounded read buffer, following the chain recovery follows: a
//! record right after its predecessor, or at the next group boundary if the
//! predecessor ended a write (or a later writer started there).
//!
//! **Invariant:** the iterator yields exactly the LSNs `from ..= end`, where
//! `end` was the durable LSN when it was created, each validated (both
//! checksums, LSN exactly the previous plus one, epoch not below the
//! previous one's); anything else is an `Err`, after which the iterator
//! ends.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{self, RECORD_HEADER_BYTES, RecordHeader, SEGMENT_HEADER_BYTES};
use super::segment::{self, SegmentFile};
use super::table::LiveSegment;
use crate::error::{Error, Result};
use crate::ids::{DatabaseId, Lsn};
use crate::storage::Storage;

/// Size of the read buffer; a larger record is read in one piece.
const CHUNK_BYTES: u64 = 256 * 1024;

/// An iterator over durable records `(lsn, payload)`, from
/// [`super::Wal::read_from`].
#[derive(Debug)]
pub struct WalIter {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    database: DatabaseId,
    segments: VecDeque<LiveSegment>,
    cursor: Option<Cursor>,
    next_lsn: Lsn,
    from: Lsn,
    end: Lsn,
    failed: bool,
    /// Offset of the last record returned, in the cursor's segment.
    last_offset: Option<u64>,
    /// The epoch of the last record read.
    epoch: u64,
}

#[derive(Debug)]
struct Cursor {
    file: SegmentFile,
    /// Where the last record read from this segment starts, and its header
    /// (`None` before the first).
    last: Option<(u64, RecordHeader)>,
    chunk: Vec<u8>,
    chunk_at: u64,
}

impl Cursor {
    /// The `len` bytes at `offset`, refilling the buffer if needed.
    fn bytes(&mut self, offset: u64, len: u64) -> Result<&[u8]> {
        let end = offset + len;
        if end > self.file.size_bytes {
            return Err(Error::corrupt(
                &self.file.path,
                offset,
                "record runs past the end of its segment",
            ));
        }
        let chunk_end = self.chunk_at + self.chunk.len() as u64;
        if offset < self.chunk_at || end > chunk_end {
            let want = len.max(CHUNK_BYTES).min(self.file.size_bytes - offset);
            self.chunk
                .resize(usize::try_from(want).expect("chunk fits usize"), 0);
            self.file
                .file
                .read_at(offset, &mut self.chunk)
                .map_err(|e| Error::io("read wal segment", &self.file.path, e))?;
            self.chunk_at = offset;
        }
        let start = usize::try_from(offset - self.chunk_at).expect("in chunk");
        let stop = start + usize::try_from(len).expect("in chunk");
        assert!(stop <= self.chunk.len());
        Ok(&self.chunk[start..stop])
    }
}

impl WalIter {
    /// An iterator over `from ..= end` given the live segments (oldest
    /// first, already trimmed so the first one holds `from`).
    pub(crate) fn new(
        storage: Arc<dyn Storage>,
        dir: PathBuf,
        database: DatabaseId,
        segments: VecDeque<LiveSegment>,
        from: Lsn,
        end: Lsn,
    ) -> WalIter {
        let next_lsn = segments.front().map_or(from, |s| s.first_lsn);
        assert!(next_lsn <= from, "the first segment holds `from`");
        WalIter {
            storage,
            dir,
            database,
            segments,
            cursor: None,
            next_lsn,
            from,
            end,
            failed: false,
            last_offset: None,
            epoch: 0,
        }
    }

    /// The segment file and byte offset of the record the iterator returned
    /// last, to name it in an error about its contents.
    pub fn position(&self) -> Option<(&Path, u64)> {
        let cursor = self.cursor.as_ref()?;
        Some((cursor.file.path.as_path(), self.last_offset?))
    }

    /// Reads the record at the cursor, expecting `self.next_lsn`.
    fn read_one(&mut self) -> Result<Option<(Lsn, Vec<u8>)>> {
        // Step into the next segment when the expected LSN is its first;
        // empty segments (first LSN equal to their successor's) are passed
        // over. Bounded by the number of segments in the snapshot.
        let mut switch = self.cursor.is_none();
        while self
            .segments
            .get(1)
            .is_some_and(|s| s.first_lsn <= self.next_lsn)
        {
            self.segments.pop_front();
            switch = true;
        }
        if switch {
            let Some(live) = self.segments.front().copied() else {
                return Ok(None);
            };
            let (file, _) = segment::open(&self.storage, &self.dir, self.database, live.id)?;
            assert!(live.first_lsn <= self.next_lsn, "segments are contiguous");
            self.cursor = Some(Cursor {
                file,
                last: None,
                chunk: Vec::new(),
                chunk_at: 0,
            });
        }
        let cursor = self.cursor.as_mut().expect("cursor set above");
        // Where the next record may start, and whether a record there must
        // come from a later writer (a higher epoch) than the last one.
        let candidates: [Option<(u64, bool)>; 2] = match cursor.last {
            None => [Some((SEGMENT_HEADER_BYTES, false)), None],
            Some((at, last)) => {
                let end = at + last.total_bytes();
                let boundary = format::align_up(end);
                if last.group_end() {
                    [Some((boundary, false)), None]
                } else {
                    [
                        Some((end, false)),
                        (boundary != end).then_some((boundary, true)),
                    ]
                }
            }
        };
        // Records below `from` are passed over: their payloads are neither
        // returned nor checked (recovery checked the whole log when it
        // opened; a wrong turn would surface as an unexpected LSN next).
        let want_payload = self.next_lsn >= self.from;
        let mut problem = None;
        for (offset, later_writer) in candidates.into_iter().flatten() {
            match Self::record_at(cursor, offset, want_payload)? {
                Some((header, Some(payload)))
                    if header.lsn == self.next_lsn
                        && (header.epoch > self.epoch
                            || (!later_writer && header.epoch == self.epoch)) =>
                {
                    cursor.last = Some((offset, header));
                    self.last_offset = Some(offset);
                    self.epoch = header.epoch;
                    self.next_lsn = header.lsn.next();
                    return Ok(Some((header.lsn, payload)));
                }
                found => {
                    problem.get_or_insert((offset, found.map(|(h, p)| (h, p.map(|_| ())))));
                }
            }
        }
        let (offset, found) = problem.expect("at least one candidate");
        let reason = match found {
            None => "invalid record header".to_string(),
            Some((_, None)) => "payload checksum mismatch".to_string(),
            Some((h, _)) if h.lsn != self.next_lsn => {
                format!("found {} where {} was expected", h.lsn, self.next_lsn)
            }
            Some((h, _)) => format!(
                "{} was written in epoch {}, below the {} before it",
                h.lsn, h.epoch, self.epoch
            ),
        };
        Err(Error::corrupt(&cursor.file.path, offset, reason))
    }

    /// The record at `offset` of the cursor's segment: `None` if its header
    /// is not valid; its payload, `None` if that is damaged (without
    /// `want_payload`, an empty one, unread and unchecked).
    fn record_at(
        cursor: &mut Cursor,
        offset: u64,
        want_payload: bool,
    ) -> Result<Option<(RecordHeader, Option<Vec<u8>>)>> {
        let seed = cursor.file.seed;
        if offset + RECORD_HEADER_BYTES as u64 > cursor.file.size_bytes {
            return Ok(None);
        }
        let raw = cursor.bytes(offset, RECORD_HEADER_BYTES as u64)?;
        let Some(header) = format::decode_record_header(raw, seed) else {
            return Ok(None);
        };
        let payload_at = offset + RECORD_HEADER_BYTES as u64;
        if payload_at + u64::from(header.len) > cursor.file.size_bytes {
            return Ok(Some((header, None)));
        }
        if !want_payload {
            return Ok(Some((header, Some(Vec::new()))));
        }
        let payload = cursor.bytes(payload_at, u64::from(header.len))?.to_vec();
        let intact = format::payload_matches(&header, seed, &payload);
        Ok(Some((header, intact.then_some(payload))))
    }
}

impl Iterator for WalIter {
    type Item = Result<(Lsn, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        // Nothing at or after `from` is durable (an open after a clean
        // close replays nothing): no record below it is read to get there.
        if self.from > self.end {
            return None;
        }
        // Skipping records below `from` is bounded by one segment's records.
        while !self.failed && self.next_lsn <= self.end {
            match self.read_one() {
                Ok(Some((lsn, payload))) if lsn >= self.from => return Some(Ok((lsn, payload))),
                Ok(Some(_)) => continue,
                Ok(None) => {
                    self.failed = true;
                    let missing = Error::LsnOutOfRange {
                        requested: self.next_lsn,
                        first: self.from,
                        last: self.end,
                    };
                    return Some(Err(missing));
                }
                Err(error) => {
                    self.failed = true;
                    return Some(Err(error));
                }
            }
        }
        None
    }
}
