//! `WalIter`: reads durable records in LSN order, segment by segment,
//! through a bounded read buffer.
//!
//! **Invariant:** the iterator yields exactly the LSNs `from ..= end`, where
//! `end` was the durable LSN when it was created, each validated (both
//! checksums, LSN exactly the previous plus one); anything else is an `Err`,
//! after which the iterator ends.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::format::{self, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
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
}

#[derive(Debug)]
struct Cursor {
    file: SegmentFile,
    offset: u64,
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
                offset: SEGMENT_HEADER_BYTES,
                chunk: Vec::new(),
                chunk_at: 0,
            });
        }
        let cursor = self.cursor.as_mut().expect("cursor set above");
        let offset = cursor.offset;
        let seed = cursor.file.seed;
        let raw = cursor.bytes(offset, RECORD_HEADER_BYTES as u64)?;
        let header = format::decode_record_header(raw, seed)
            .ok_or_else(|| Error::corrupt(&cursor.file.path, offset, "invalid record header"))?;
        if header.lsn != self.next_lsn {
            return Err(Error::corrupt(
                &cursor.file.path,
                offset,
                format!("found {} where {} was expected", header.lsn, self.next_lsn),
            ));
        }
        let payload_at = offset + RECORD_HEADER_BYTES as u64;
        let payload = cursor.bytes(payload_at, u64::from(header.len))?.to_vec();
        if !format::payload_matches(&header, seed, &payload) {
            return Err(Error::corrupt(
                &cursor.file.path,
                offset,
                "payload checksum mismatch",
            ));
        }
        cursor.offset = payload_at + u64::from(header.len);
        self.last_offset = Some(offset);
        self.next_lsn = header.lsn.next();
        Ok(Some((header.lsn, payload)))
    }
}

impl Iterator for WalIter {
    type Item = Result<(Lsn, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
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
