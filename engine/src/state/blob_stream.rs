//! The blob stream: content-addressed blobs stored in the order they were
//! first written (schema 13), instead of one B-tree row per blob keyed by
//! its digest.
//!
//! Why: a blob row keyed by a random digest lands in a random leaf, and
//! redb splits a full leaf in its middle, so the blobs table's leaves were
//! a third empty (8.3 of 20.9 MB on the LangGraph bench) and every insert
//! rewrote a half-full leaf somewhere in the tree. Here every blob is a
//! record appended to one byte stream, cut into chunk rows of
//! [`CHUNK_BYTES`] (a chunk fills one 4 KiB redb leaf), and a small index
//! maps each digest to its record's offset.
//!
//! Layout (docs/FORMAT.md, "Blob stream"):
//!
//! - `books_blob_chunks`: chunk number `k` -> the stream's bytes
//!   `[k * CHUNK_BYTES, (k + 1) * CHUNK_BYTES)`, the last chunk cut at the
//!   stream's end.
//! - `books_blob_index`: digest -> the offset of the blob's record.
//! - `books_blob_stream`: `head` (the first byte still kept), `end` (where
//!   the next record goes) and `live` (the bytes of the records the index
//!   names).
//! - A record is `len` (u32, little endian), the blob's 32-byte digest and
//!   its `len` bytes.
//!
//! Deleting a blob removes its index entry and leaves its record dead in
//! the stream. While dead bytes are more than half the live ones, each
//! deletion cleans the stream's head by three times the bytes it freed: a
//! live record there is appended again at the end (the index follows), a
//! dead one is passed, and every chunk wholly behind the head is removed.
//! Cleaning a live head of `P` bytes takes `P / 3` bytes of deletions, so
//! dead bytes stay under about `live / 2 + live / 3`: the stream holds
//! less than twice its live bytes (and a record or two), and a deletion
//! copies at most three times the bytes it freed, plus the one record it
//! began on (whole records are passed).
//!
//! A store written before schema 13 keeps its blobs in `books_blobs`
//! (digest -> bytes): they are read, counted and deleted where they are,
//! and a digest found there is not written again.
//!
//! **Invariant:** a record named by the index lies in `[head, end)` and
//! every chunk it touches is present; `live` is the sum of the lengths of
//! the records the index names. Damage to either is an error naming the
//! chunk, the offset or the digest, never a panic.

use redb::{AccessGuard, ReadableTable, Table, TableDefinition};

use crate::books::Digest;

/// The stream's chunks, by chunk number. Added in schema version 13.
pub const BLOB_CHUNKS_TABLE: TableDefinition<u64, &[u8]> =
    TableDefinition::new("books_blob_chunks");
/// Where each blob's record starts in the stream, by digest. Added in
/// schema version 13.
pub const BLOB_INDEX_TABLE: TableDefinition<&[u8], u64> = TableDefinition::new("books_blob_index");
/// The stream's `head`, `end` and `live` counts. Added in schema version 13.
pub const BLOB_STREAM_TABLE: TableDefinition<&str, u64> = TableDefinition::new("books_blob_stream");

/// The bytes of a chunk row: one such row, with its `u64` key and redb's
/// 8 bytes of leaf header and value end, fills a 4,096-byte leaf.
pub const CHUNK_BYTES: u64 = 4080;
/// A record's header: the blob's length (u32) and digest.
pub const RECORD_HEADER: u64 = 4 + 32;

const HEAD_KEY: &str = "head";
const END_KEY: &str = "end";
const LIVE_KEY: &str = "live";

/// The stream's counts (`books_blob_stream`); all zero in a new store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stream {
    /// The first byte still kept: records before it are gone.
    pub head: u64,
    /// The stream's length: the next record starts here.
    pub end: u64,
    /// The bytes (headers included) of the records the index names.
    pub live: u64,
}

impl Stream {
    /// Reads the counts from `table` (zero where a key is absent).
    pub fn read(table: &impl ReadableTable<&'static str, u64>) -> Result<Stream, redb::Error> {
        let get = |key| -> Result<u64, redb::Error> {
            Ok(table.get(key)?.map(|v| v.value()).unwrap_or(0))
        };
        let stream = Stream { head: get(HEAD_KEY)?, end: get(END_KEY)?, live: get(LIVE_KEY)? };
        stream.dead()?;
        Ok(stream)
    }

    /// Writes the counts that differ from `before`.
    fn write(
        &self,
        before: &Stream,
        table: &mut Table<'_, &'static str, u64>,
    ) -> Result<(), redb::Error> {
        for (key, now, was) in [
            (HEAD_KEY, self.head, before.head),
            (END_KEY, self.end, before.end),
            (LIVE_KEY, self.live, before.live),
        ] {
            if now != was {
                table.insert(key, now)?;
            }
        }
        Ok(())
    }

    /// Bytes between `head` and `end` that no index entry names.
    pub fn dead(&self) -> Result<u64, redb::Error> {
        self.end
            .checked_sub(self.head)
            .and_then(|kept| kept.checked_sub(self.live))
            .ok_or_else(|| {
                damaged(format!(
                    "the blob stream's counts do not hold: head {} end {} live {}",
                    self.head, self.end, self.live
                ))
            })
    }
}

fn damaged(what: String) -> redb::Error {
    redb::Error::Corrupted(what)
}

/// The chunk a read of the stream used last, kept for the next read of
/// the same record: a record's header and its first bytes share a chunk,
/// and one look-up of it serves both.
type LastChunk<'c> = Option<(u64, AccessGuard<'c, &'static [u8]>)>;

/// The `len` bytes of the stream at `at`, gathered from their chunks.
fn read_span<'c>(
    chunks: &'c impl ReadableTable<u64, &'static [u8]>,
    last: &mut LastChunk<'c>,
    at: u64,
    len: u64,
) -> Result<Vec<u8>, redb::Error> {
    // A damaged length must not reserve gigabytes: grow as chunks are read.
    let mut out = Vec::with_capacity(usize::try_from(len.min(1 << 20)).expect("small"));
    let mut pos = at;
    let stop = at
        .checked_add(len)
        .ok_or_else(|| damaged(format!("a blob record at offset {at} runs past 2^64")))?;
    while pos < stop {
        let k = pos / CHUNK_BYTES;
        let within = usize::try_from(pos % CHUNK_BYTES).expect("below CHUNK_BYTES");
        if last.as_ref().is_none_or(|(held, _)| *held != k) {
            let chunk = chunks.get(k)?.ok_or_else(|| {
                damaged(format!("blob stream chunk {k} (offset {pos}) is missing"))
            })?;
            *last = Some((k, chunk));
        }
        let bytes = last.as_ref().map(|(_, chunk)| chunk.value()).unwrap_or_default();
        let want = usize::try_from((stop - pos).min(CHUNK_BYTES)).expect("below CHUNK_BYTES");
        let take = want.min(bytes.len().saturating_sub(within));
        if take == 0 {
            return Err(damaged(format!(
                "blob stream chunk {k} holds {} bytes, short of offset {pos}",
                bytes.len()
            )));
        }
        out.extend_from_slice(&bytes[within..within + take]);
        pos += take as u64;
    }
    Ok(out)
}

/// The header of the record at `at`: its blob's length and digest.
fn read_header<'c>(
    chunks: &'c impl ReadableTable<u64, &'static [u8]>,
    last: &mut LastChunk<'c>,
    at: u64,
) -> Result<(u64, Digest), redb::Error> {
    let header = read_span(chunks, last, at, RECORD_HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().expect("4 bytes"));
    let digest = Digest(header[4..].try_into().expect("32 bytes"));
    Ok((u64::from(len), digest))
}

/// The bytes of `digest`'s record at `at`, whose header must name it.
pub fn read_record(
    chunks: &impl ReadableTable<u64, &'static [u8]>,
    digest: &Digest,
    at: u64,
) -> Result<Vec<u8>, redb::Error> {
    let mut last = None;
    let (len, named) = read_header(chunks, &mut last, at)?;
    if named != *digest {
        return Err(damaged(format!(
            "the blob record at offset {at} holds blob {}, not blob {} its index entry names",
            named.short(),
            digest.short()
        )));
    }
    read_span(chunks, &mut last, at + RECORD_HEADER, len)
}

/// Where a blob is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A record of the stream, at this offset.
    Stream(u64),
    /// A row of the blobs table of a store written before schema 13.
    Table,
}

/// The tables a blob is read from: any may be absent (a read snapshot
/// that never held it; a store that never held an older blobs table).
pub struct BlobReader<'t, I, C, O> {
    /// `books_blob_index`.
    pub index: Option<&'t I>,
    /// `books_blob_chunks`.
    pub chunks: Option<&'t C>,
    /// `books_blobs`, of a store written before schema 13.
    pub old: Option<&'t O>,
}

/// Blob reads, whatever transaction the tables are open in.
pub trait BlobLookup {
    /// Where `digest` is kept, if anywhere.
    fn find(&self, digest: &Digest) -> Result<Option<Found>, redb::Error>;
    /// The bytes of `digest`, if it is kept.
    fn read(&self, digest: &Digest) -> Result<Option<Vec<u8>>, redb::Error>;
    /// How many blobs are kept.
    fn count(&self) -> Result<u64, redb::Error>;
}

impl<I, C, O> BlobLookup for BlobReader<'_, I, C, O>
where
    I: ReadableTable<&'static [u8], u64>,
    C: ReadableTable<u64, &'static [u8]>,
    O: ReadableTable<&'static [u8], &'static [u8]>,
{
    fn find(&self, digest: &Digest) -> Result<Option<Found>, redb::Error> {
        if let Some(index) = self.index
            && let Some(at) = index.get(digest.0.as_slice())?
        {
            return Ok(Some(Found::Stream(at.value())));
        }
        if let Some(old) = self.old
            && old.get(digest.0.as_slice())?.is_some()
        {
            return Ok(Some(Found::Table));
        }
        Ok(None)
    }

    fn read(&self, digest: &Digest) -> Result<Option<Vec<u8>>, redb::Error> {
        match self.find(digest)? {
            None => Ok(None),
            Some(Found::Stream(at)) => {
                let chunks = self.chunks.ok_or_else(|| {
                    damaged(format!(
                        "blob {} is indexed at offset {at} of a stream with no chunks",
                        digest.short()
                    ))
                })?;
                read_record(chunks, digest, at).map(Some)
            }
            Some(Found::Table) => {
                let old = self.old.expect("found in it");
                Ok(old.get(digest.0.as_slice())?.map(|v| v.value().to_vec()))
            }
        }
    }

    fn count(&self) -> Result<u64, redb::Error> {
        let mut n = 0;
        if let Some(index) = self.index {
            n += index.len()?;
        }
        if let Some(old) = self.old {
            n += old.len()?;
        }
        Ok(n)
    }
}

/// The blob tables of a write transaction, opened, and the stream's
/// counts as this transaction left them.
pub struct BlobWriter<'s, 'a> {
    /// `books_blob_index`.
    pub index: &'s mut Table<'a, &'static [u8], u64>,
    /// `books_blob_chunks`.
    pub chunks: &'s mut Table<'a, u64, &'static [u8]>,
    /// `books_blob_stream`.
    pub counts: &'s mut Table<'a, &'static str, u64>,
    /// The blobs table of a store written before schema 13, if it has one.
    pub old: Option<&'s mut Table<'a, &'static [u8], &'static [u8]>>,
    /// The planted `CleanerLosesMoves`: a moved record's index entry stays
    /// on the old copy.
    pub loses_moves: bool,
}

impl BlobWriter<'_, '_> {
    /// Stores `bytes` under `digest` unless a blob of that digest is kept:
    /// content addressed, it holds these bytes.
    pub fn put(&mut self, digest: &Digest, bytes: &[u8]) -> Result<(), redb::Error> {
        if self.index.get(digest.0.as_slice())?.is_some() {
            return Ok(());
        }
        if let Some(old) = self.old.as_deref()
            && old.get(digest.0.as_slice())?.is_some()
        {
            return Ok(());
        }
        let before = Stream::read(&*self.counts)?;
        let mut stream = before;
        let at = self.append(&mut stream, digest, bytes)?;
        self.index.insert(digest.0.as_slice(), at)?;
        stream.live += RECORD_HEADER + bytes.len() as u64;
        stream.write(&before, self.counts)
    }

    /// Forgets `digest`'s blob (nothing if none is kept), then cleans the
    /// stream's head by three times the bytes freed while dead bytes are
    /// more than half the live ones.
    pub fn remove(&mut self, digest: &Digest) -> Result<(), redb::Error> {
        let Some(at) = self.index.remove(digest.0.as_slice())?.map(|v| v.value()) else {
            if let Some(old) = self.old.as_deref_mut() {
                old.remove(digest.0.as_slice())?;
            }
            return Ok(());
        };
        let (len, named) = read_header(&*self.chunks, &mut None, at)?;
        if named != *digest {
            return Err(damaged(format!(
                "the blob record at offset {at} holds blob {}, not blob {} its index entry names",
                named.short(),
                digest.short()
            )));
        }
        let before = Stream::read(&*self.counts)?;
        let mut stream = before;
        let freed = RECORD_HEADER + len;
        stream.live = stream.live.checked_sub(freed).ok_or_else(|| {
            damaged(format!(
                "blob {} ({freed} bytes) is more than the stream's {} live bytes",
                digest.short(),
                stream.live
            ))
        })?;
        self.clean(&mut stream, freed.saturating_mul(3))?;
        stream.write(&before, self.counts)
    }

    /// Passes records at the head while dead bytes are more than half the
    /// live ones and `budget` bytes are left: a live record is appended
    /// again at the end.
    fn clean(&mut self, stream: &mut Stream, mut budget: u64) -> Result<(), redb::Error> {
        while budget > 0 && stream.head < stream.end && stream.dead()?.saturating_mul(2) > stream.live {
            let at = stream.head;
            let (len, digest) = read_header(&*self.chunks, &mut None, at)?;
            let size = RECORD_HEADER + len;
            let next = at.checked_add(size).filter(|next| *next <= stream.end).ok_or_else(|| {
                damaged(format!(
                    "the blob record at offset {at} ({size} bytes) runs past the stream's end {}",
                    stream.end
                ))
            })?;
            let indexed = self.index.get(digest.0.as_slice())?.map(|v| v.value());
            if indexed == Some(at) {
                let bytes = read_span(&*self.chunks, &mut None, at + RECORD_HEADER, len)?;
                let moved = self.append(stream, &digest, &bytes)?;
                if !self.loses_moves {
                    self.index.insert(digest.0.as_slice(), moved)?;
                }
            }
            stream.head = next;
            for k in at / CHUNK_BYTES..next / CHUNK_BYTES {
                self.chunks.remove(k)?;
            }
            budget = budget.saturating_sub(size);
        }
        Ok(())
    }

    /// Appends `digest`'s record at the stream's end; returns its offset.
    fn append(
        &mut self,
        stream: &mut Stream,
        digest: &Digest,
        bytes: &[u8],
    ) -> Result<u64, redb::Error> {
        let len = u32::try_from(bytes.len()).map_err(|_| {
            damaged(format!("blob {} of {} bytes is over 4 GiB", digest.short(), bytes.len()))
        })?;
        let mut record = Vec::with_capacity(RECORD_HEADER as usize + bytes.len());
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&digest.0);
        record.extend_from_slice(bytes);
        let at = stream.end;
        let mut pos = at;
        let mut rest = record.as_slice();
        while !rest.is_empty() {
            let k = pos / CHUNK_BYTES;
            let within = usize::try_from(pos % CHUNK_BYTES).expect("below CHUNK_BYTES");
            let mut chunk = Vec::with_capacity(CHUNK_BYTES as usize);
            if within > 0 {
                let held = self.chunks.get(k)?.ok_or_else(|| {
                    damaged(format!("blob stream chunk {k}, the stream's last, is missing"))
                })?;
                if held.value().len() != within {
                    return Err(damaged(format!(
                        "blob stream chunk {k} holds {} bytes; the stream's end says {within}",
                        held.value().len()
                    )));
                }
                chunk.extend_from_slice(held.value());
            }
            let take = rest.len().min(CHUNK_BYTES as usize - within);
            chunk.extend_from_slice(&rest[..take]);
            self.chunks.insert(k, chunk.as_slice())?;
            rest = &rest[take..];
            pos += take as u64;
        }
        stream.end = pos;
        Ok(at)
    }
}

/// Checks the stream against its index: every indexed record lies in
/// `[head, end)` and names its digest, `live` is their sum, and no chunk
/// lies wholly behind the head. Returns the problems found (empty: it
/// holds), each naming the digest, offset or chunk.
pub fn problems(
    index: Option<&impl ReadableTable<&'static [u8], u64>>,
    chunks: Option<&impl ReadableTable<u64, &'static [u8]>>,
    counts: Option<&impl ReadableTable<&'static str, u64>>,
) -> Result<Vec<String>, redb::Error> {
    let stream = match counts {
        Some(table) => Stream::read(table)?,
        None => Stream::default(),
    };
    let mut problems = Vec::new();
    let mut live = 0u64;
    if let Some(index) = index {
        for row in index.iter()? {
            let (key, at) = row?;
            let at = at.value();
            let Ok(digest) = <[u8; 32]>::try_from(key.value()).map(Digest) else {
                problems.push(format!("a blob index key of {} bytes", key.value().len()));
                continue;
            };
            if at < stream.head || at >= stream.end {
                problems.push(format!(
                    "blob {} is indexed at offset {at}, outside the stream's [{}, {})",
                    digest.short(),
                    stream.head,
                    stream.end
                ));
                continue;
            }
            let Some(chunks) = chunks else {
                problems.push(format!("blob {} is indexed but no chunk is", digest.short()));
                continue;
            };
            match read_record(chunks, &digest, at) {
                Ok(bytes) => {
                    if crate::books::digest_of(&bytes) != digest {
                        problems.push(format!(
                            "the blob record at offset {at} does not hash to blob {}",
                            digest.short()
                        ));
                    }
                    live += RECORD_HEADER + bytes.len() as u64;
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
    }
    if live != stream.live {
        problems.push(format!(
            "the blob stream counts {} live bytes; its index names {live}",
            stream.live
        ));
    }
    if let Some(chunks) = chunks
        && let Some(first) = chunks.first()?
    {
        let k = first.0.value();
        if k.saturating_add(1).saturating_mul(CHUNK_BYTES) <= stream.head {
            problems.push(format!(
                "blob stream chunk {k} lies behind the stream's head {}",
                stream.head
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests;
