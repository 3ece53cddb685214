//! The WAL's on-disk format: segment header and record header codecs.
//!
//! Pure functions, no I/O. Every constant is derived from the ones it depends
//! on, and `docs/FORMAT.md` repeats the layout as byte diagrams.
//!
//! **Invariant:** bytes that do not decode to a valid header are an `Err` or
//! `None`, never a panic; an all-zero record header never validates (its LSN
//! is 0, and LSNs start at 1), and both record checksums are seeded with
//! (database id, segment number), so a record written by another database or
//! by an older use of a recycled segment file never validates either.

use std::path::{Path, PathBuf};

use crate::ids::{DatabaseId, Lsn, SegmentId};

/// First bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"ACTUMWAL";
/// The segment format version this build reads and writes (2: groups
/// start at [`GROUP_ALIGN_BYTES`] and records carry the writer's epoch).
pub const FORMAT_VERSION: u32 = 2;
/// Bytes reserved for the segment header at the start of every segment.
pub const SEGMENT_HEADER_BYTES: u64 = 4096;

const MAGIC_AT: usize = 0;
const VERSION_AT: usize = MAGIC_AT + SEGMENT_MAGIC.len();
const RESERVED_AT: usize = VERSION_AT + 4;
const DATABASE_AT: usize = RESERVED_AT + 4;
const SEGMENT_AT: usize = DATABASE_AT + 16;
const FIRST_LSN_AT: usize = SEGMENT_AT + 8;
const HEADER_CRC_AT: usize = FIRST_LSN_AT + 8;
/// Bytes of the segment header that carry data; the rest of the
/// [`SEGMENT_HEADER_BYTES`] is zero.
pub const SEGMENT_HEADER_USED_BYTES: usize = HEADER_CRC_AT + 4;

const LEN_AT: usize = 0;
const FLAGS_AT: usize = LEN_AT + 4;
const LSN_AT: usize = FLAGS_AT + 4;
const ACK_AT: usize = LSN_AT + 8;
const EPOCH_AT: usize = ACK_AT + 8;
const PAYLOAD_CRC_AT: usize = EPOCH_AT + 8;
const RECORD_CRC_AT: usize = PAYLOAD_CRC_AT + 4;
/// Bytes of a record header; the payload follows immediately (no padding).
pub const RECORD_HEADER_BYTES: usize = RECORD_CRC_AT + 4;

/// Record flag: more records of the same batch follow this one.
pub const FLAG_MORE: u32 = 1;
/// Record flag: the last record of a group-commit write; the next record
/// starts at the next multiple of [`GROUP_ALIGN_BYTES`].
pub const FLAG_GROUP_END: u32 = 2;
const FLAGS_KNOWN: u32 = FLAG_MORE | FLAG_GROUP_END;

/// Every group-commit write starts at a multiple of this many bytes of its
/// segment (a disk sector): a write never shares a sector with an earlier
/// one, and recovery looks for later writes only at these offsets.
pub const GROUP_ALIGN_BYTES: u64 = 512;

const _: () = assert!(SEGMENT_HEADER_USED_BYTES == 52);
const _: () = assert!(RECORD_HEADER_BYTES == 40);
const _: () = assert!((SEGMENT_HEADER_USED_BYTES as u64) < SEGMENT_HEADER_BYTES);
const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(GROUP_ALIGN_BYTES));

/// `offset` rounded up to the next multiple of [`GROUP_ALIGN_BYTES`].
pub fn align_up(offset: u64) -> u64 {
    offset.div_ceil(GROUP_ALIGN_BYTES) * GROUP_ALIGN_BYTES
}

/// The decoded segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The database the segment belongs to.
    pub database: DatabaseId,
    /// The segment's number; matches its file name.
    pub segment: SegmentId,
    /// A lower bound on the LSNs of the segment's records, fixed when the
    /// segment is prepared (the exact first LSN is not known that early).
    pub first_lsn: Lsn,
}

/// Why a segment header was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a segment, or damaged (bad magic or checksum).
    Damaged(&'static str),
    /// Written by another format version.
    Version(u32),
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(raw)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(raw)
}

impl SegmentHeader {
    /// Encodes the full [`SEGMENT_HEADER_BYTES`] header block.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.segment.0 >= 1, "segment numbers start at 1");
        assert!(self.first_lsn.0 >= 1, "LSNs start at 1");
        let mut out = vec![0u8; SEGMENT_HEADER_BYTES as usize];
        out[MAGIC_AT..VERSION_AT].copy_from_slice(&SEGMENT_MAGIC);
        out[VERSION_AT..RESERVED_AT].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[DATABASE_AT..SEGMENT_AT].copy_from_slice(&self.database.0.to_le_bytes());
        out[SEGMENT_AT..FIRST_LSN_AT].copy_from_slice(&self.segment.0.to_le_bytes());
        out[FIRST_LSN_AT..HEADER_CRC_AT].copy_from_slice(&self.first_lsn.0.to_le_bytes());
        let crc = crc32fast::hash(&out[..HEADER_CRC_AT]);
        out[HEADER_CRC_AT..SEGMENT_HEADER_USED_BYTES].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(SegmentHeader::decode(&out), Ok(*self));
        out
    }

    /// Decodes a header from the first bytes of a segment file.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderError> {
        if bytes.len() < SEGMENT_HEADER_USED_BYTES {
            return Err(HeaderError::Damaged("file shorter than a segment header"));
        }
        if bytes[MAGIC_AT..VERSION_AT] != SEGMENT_MAGIC {
            return Err(HeaderError::Damaged("bad segment magic"));
        }
        let version = u32_at(bytes, VERSION_AT);
        if version != FORMAT_VERSION {
            return Err(HeaderError::Version(version));
        }
        if crc32fast::hash(&bytes[..HEADER_CRC_AT]) != u32_at(bytes, HEADER_CRC_AT) {
            return Err(HeaderError::Damaged("segment header checksum mismatch"));
        }
        let mut database = [0u8; 16];
        database.copy_from_slice(&bytes[DATABASE_AT..SEGMENT_AT]);
        let header = SegmentHeader {
            database: DatabaseId(u128::from_le_bytes(database)),
            segment: SegmentId(u64_at(bytes, SEGMENT_AT)),
            first_lsn: Lsn(u64_at(bytes, FIRST_LSN_AT)),
        };
        if header.segment.0 == 0 || header.first_lsn.0 == 0 || u32_at(bytes, RESERVED_AT) != 0 {
            return Err(HeaderError::Damaged("segment header field out of range"));
        }
        Ok(header)
    }
}

/// The checksum seed of every record in segment `segment` of `database`.
pub fn record_seed(database: DatabaseId, segment: SegmentId) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&database.0.to_le_bytes());
    hasher.update(&segment.0.to_le_bytes());
    hasher.finalize()
}

/// A decoded record header whose own checksum validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Payload length in bytes.
    pub len: u32,
    /// Flag bits ([`FLAG_MORE`], [`FLAG_GROUP_END`]).
    pub flags: u32,
    /// The record's LSN.
    pub lsn: Lsn,
    /// The highest LSN known durable when the record was written.
    pub ack: Lsn,
    /// The epoch of the log writer that wrote it: grows with every open of
    /// the database, so the log's epochs never decrease along the LSNs.
    pub epoch: u64,
    /// Checksum of the payload, seeded.
    pub payload_crc: u32,
}

impl RecordHeader {
    /// Whether more records of the same batch follow.
    pub fn more(&self) -> bool {
        self.flags & FLAG_MORE != 0
    }

    /// Whether this record ends a group-commit write.
    pub fn group_end(&self) -> bool {
        self.flags & FLAG_GROUP_END != 0
    }

    /// Total encoded size of the record, header plus payload.
    pub fn total_bytes(&self) -> u64 {
        RECORD_HEADER_BYTES as u64 + u64::from(self.len)
    }

    /// Where the record after this one (at `offset`) starts: right after
    /// it, or at the next group boundary if it ends a write.
    pub fn next_offset(&self, offset: u64) -> u64 {
        let end = offset + self.total_bytes();
        if self.group_end() { align_up(end) } else { end }
    }
}

/// What a record header says about its record, besides its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordMeta {
    /// The record's LSN.
    pub lsn: Lsn,
    /// The durable LSN when it is written (the ack watermark).
    pub ack: Lsn,
    /// The writer's epoch.
    pub epoch: u64,
    /// More records of its batch follow.
    pub more: bool,
    /// It ends its group-commit write.
    pub group_end: bool,
}

/// Appends one encoded record (header and payload) to `out`.
pub fn encode_record(out: &mut Vec<u8>, seed: u32, meta: RecordMeta, payload: &[u8]) {
    assert!(
        meta.lsn.0 >= 1 && meta.ack < meta.lsn,
        "a record's ack watermark is below its LSN"
    );
    assert!(meta.epoch >= 1, "epochs start at 1");
    let len = u32::try_from(payload.len()).expect("payload length checked against the max");
    let flags =
        if meta.more { FLAG_MORE } else { 0 } | if meta.group_end { FLAG_GROUP_END } else { 0 };
    let start = out.len();
    let mut payload_hasher = crc32fast::Hasher::new_with_initial(seed);
    payload_hasher.update(payload);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&meta.lsn.0.to_le_bytes());
    out.extend_from_slice(&meta.ack.0.to_le_bytes());
    out.extend_from_slice(&meta.epoch.to_le_bytes());
    out.extend_from_slice(&payload_hasher.finalize().to_le_bytes());
    let mut header_hasher = crc32fast::Hasher::new_with_initial(seed);
    header_hasher.update(&out[start..start + RECORD_CRC_AT]);
    out.extend_from_slice(&header_hasher.finalize().to_le_bytes());
    out.extend_from_slice(payload);
    debug_assert_eq!(
        decode_record_header(&out[start..], seed).map(|h| h.lsn),
        Some(meta.lsn)
    );
}

/// Decodes and checks a record header at the start of `bytes`; `None` if
/// too short, its checksum fails, or a field is out of range.
pub fn decode_record_header(bytes: &[u8], seed: u32) -> Option<RecordHeader> {
    let raw = bytes.get(..RECORD_HEADER_BYTES)?;
    let lsn = Lsn(u64_at(raw, LSN_AT));
    if lsn.0 == 0 {
        return None; // Preallocated zeros, never a record.
    }
    let mut hasher = crc32fast::Hasher::new_with_initial(seed);
    hasher.update(&raw[..RECORD_CRC_AT]);
    if hasher.finalize() != u32_at(raw, RECORD_CRC_AT) {
        return None;
    }
    let header = RecordHeader {
        len: u32_at(raw, LEN_AT),
        flags: u32_at(raw, FLAGS_AT),
        lsn,
        ack: Lsn(u64_at(raw, ACK_AT)),
        epoch: u64_at(raw, EPOCH_AT),
        payload_crc: u32_at(raw, PAYLOAD_CRC_AT),
    };
    if header.flags & !FLAGS_KNOWN != 0 || header.ack >= header.lsn || header.epoch == 0 {
        return None;
    }
    Some(header)
}

/// Whether `payload` matches the checksum in `header`.
pub fn payload_matches(header: &RecordHeader, seed: u32, payload: &[u8]) -> bool {
    assert_eq!(payload.len() as u64, u64::from(header.len));
    let mut hasher = crc32fast::Hasher::new_with_initial(seed);
    hasher.update(payload);
    hasher.finalize() == header.payload_crc
}

/// The file name of segment `segment`: 20-digit zero-padded number + `.wal`.
pub fn segment_file_name(segment: SegmentId) -> String {
    format!("{:020}.wal", segment.0)
}

/// The path of segment `segment` in `dir`.
pub fn segment_path(dir: &Path, segment: SegmentId) -> PathBuf {
    dir.join(segment_file_name(segment))
}

/// Parses a segment file name; `None` for any other name.
pub fn parse_segment_file_name(name: &str) -> Option<SegmentId> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(SegmentId)
}

/// The temporary name a segment is prepared under before its rename.
pub fn temp_file_name(segment: SegmentId) -> String {
    format!("{}.tmp", segment_file_name(segment))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trips_and_rejects_damage() {
        let header = SegmentHeader {
            database: DatabaseId(0xfeed),
            segment: SegmentId(7),
            first_lsn: Lsn(42),
        };
        let mut bytes = header.encode();
        assert_eq!(bytes.len() as u64, SEGMENT_HEADER_BYTES);
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
        bytes[SEGMENT_AT] ^= 1;
        assert!(matches!(
            SegmentHeader::decode(&bytes),
            Err(HeaderError::Damaged(_))
        ));
        bytes[VERSION_AT] = 3;
        assert_eq!(SegmentHeader::decode(&bytes), Err(HeaderError::Version(3)));
        assert!(SegmentHeader::decode(&[0u8; 4096]).is_err());
    }

    #[test]
    fn records_round_trip_and_zeros_or_foreign_seeds_never_validate() {
        let seed = record_seed(DatabaseId(1), SegmentId(1));
        let mut out = Vec::new();
        let meta = RecordMeta {
            lsn: Lsn(5),
            ack: Lsn(3),
            epoch: 7,
            more: true,
            group_end: false,
        };
        encode_record(&mut out, seed, meta, b"hello");
        let header = decode_record_header(&out, seed).expect("valid");
        assert_eq!(
            (header.lsn, header.ack, header.epoch, header.len),
            (Lsn(5), Lsn(3), 7, 5)
        );
        assert!(header.more() && !header.group_end());
        assert_eq!(header.next_offset(4096), 4096 + 40 + 5);
        assert!(payload_matches(&header, seed, &out[RECORD_HEADER_BYTES..]));
        let other = record_seed(DatabaseId(1), SegmentId(2));
        assert_eq!(decode_record_header(&out, other), None);
        assert_eq!(
            decode_record_header(&out, record_seed(DatabaseId(2), SegmentId(1))),
            None
        );
        for seed in [0, 1, seed, other, u32::MAX] {
            assert_eq!(
                decode_record_header(&[0u8; RECORD_HEADER_BYTES], seed),
                None
            );
        }
    }

    #[test]
    fn a_group_end_moves_the_next_record_to_the_next_boundary() {
        let seed = record_seed(DatabaseId(1), SegmentId(1));
        let mut out = Vec::new();
        let meta = RecordMeta {
            lsn: Lsn(1),
            ack: Lsn(0),
            epoch: 1,
            more: false,
            group_end: true,
        };
        encode_record(&mut out, seed, meta, b"x");
        let header = decode_record_header(&out, seed).expect("valid");
        assert!(header.group_end());
        assert_eq!(header.next_offset(4096), 4096 + GROUP_ALIGN_BYTES);
        assert_eq!(header.next_offset(4096 + 472), 4096 + 1024);
        assert_eq!(align_up(4096), 4096);
        assert_eq!(align_up(4097), 4608);
    }

    #[test]
    fn segment_file_names_sort_numerically() {
        assert_eq!(segment_file_name(SegmentId(12)), "00000000000000000012.wal");
        assert_eq!(
            parse_segment_file_name("00000000000000000012.wal"),
            Some(SegmentId(12))
        );
        assert_eq!(parse_segment_file_name("12.wal"), None);
        assert_eq!(parse_segment_file_name(&temp_file_name(SegmentId(3))), None);
        assert!(segment_file_name(SegmentId(9)) < segment_file_name(SegmentId(10)));
    }
}
