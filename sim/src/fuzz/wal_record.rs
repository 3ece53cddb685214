//! Fuzz target `wal_record`: the WAL's record and segment header codecs on
//! arbitrary bytes under an arbitrary checksum seed.
//!
//! Input: a 4-byte little-endian seed, a mode byte, then the body. An even
//! mode decodes the body as a record (and as a segment header); an odd mode
//! reads `lsn`, `ack`, `epoch` and a flags byte (bit 0 more, bit 1 group
//! end) from the body and encodes a record with the rest as payload. Either way a valid record must re-encode to the
//! same bytes (pair check), and every single-byte change of its encoding
//! must make it invalid.
//!
//! **Invariant:** decoding never panics; what decodes obeys the header's
//! rules (LSN at least 1, ack below the LSN, epoch at least 1, only known
//! flags).

use actum::Lsn;
use actum::wal::format::{
    self, FLAG_GROUP_END, FLAG_MORE, RECORD_HEADER_BYTES, RecordHeader, RecordMeta,
    SEGMENT_HEADER_USED_BYTES, SegmentHeader,
};

use super::bytes::Bytes;

/// Payload positions flipped per record, at most (every header byte is).
const PAYLOAD_FLIPS_MAX: usize = 64;

/// Runs the `wal_record` target on `data`.
pub fn wal_record(data: &[u8]) {
    let mut input = Bytes::new(data);
    let seed = input.u32();
    let mode = input.u8();
    let flip = input.u8().max(1);
    if mode & 1 == 0 {
        let body = input.rest();
        check_segment_header(body);
        check_decoded(seed, body, flip);
    } else {
        let lsn = Lsn(input.u64());
        let ack = Lsn(input.u64());
        let epoch = input.u64();
        let flags = input.u8();
        if lsn.0 == 0 || ack >= lsn || epoch == 0 {
            return; // Not a record the writer could produce.
        }
        let meta = RecordMeta {
            lsn,
            ack,
            epoch,
            more: flags & 1 == 1,
            group_end: flags & 2 == 2,
        };
        let payload = input.rest();
        let mut encoded = Vec::new();
        format::encode_record(&mut encoded, seed, meta, payload);
        let (header, decoded_payload) =
            full_record(&encoded, seed).expect("a freshly encoded record decodes");
        assert_eq!(
            (
                header.lsn,
                header.ack,
                header.epoch,
                header.more(),
                header.group_end(),
                decoded_payload
            ),
            (lsn, ack, epoch, meta.more, meta.group_end, payload),
            "decode(encode(record)) differs from the record"
        );
        assert_flips_rejected(seed, &encoded, flip);
    }
}

/// The header and payload of a fully valid record at the start of `bytes`.
fn full_record(bytes: &[u8], seed: u32) -> Option<(RecordHeader, &[u8])> {
    let header = format::decode_record_header(bytes, seed)?;
    let end = usize::try_from(header.total_bytes()).ok()?;
    let payload = bytes.get(RECORD_HEADER_BYTES..end)?;
    format::payload_matches(&header, seed, payload).then_some((header, payload))
}

/// Decodes `body` as a record; a valid one must obey the header rules,
/// re-encode to the same bytes and reject every single-byte change.
fn check_decoded(seed: u32, body: &[u8], flip: u8) {
    let Some(header) = format::decode_record_header(body, seed) else {
        return;
    };
    assert!(header.lsn.0 >= 1, "decoded a record with LSN 0: {header:?}");
    assert!(header.ack < header.lsn, "decoded ack >= lsn: {header:?}");
    assert!(header.epoch >= 1, "decoded epoch 0: {header:?}");
    assert_eq!(
        header.flags & !(FLAG_MORE | FLAG_GROUP_END),
        0,
        "unknown flags: {header:?}"
    );
    let Some((header, payload)) = full_record(body, seed) else {
        return; // Payload missing or damaged: a torn record, not an error.
    };
    let mut encoded = Vec::new();
    let meta = RecordMeta {
        lsn: header.lsn,
        ack: header.ack,
        epoch: header.epoch,
        more: header.more(),
        group_end: header.group_end(),
    };
    format::encode_record(&mut encoded, seed, meta, payload);
    assert_eq!(
        encoded.as_slice(),
        &body[..encoded.len()],
        "encode(decode(bytes)) differs from the bytes"
    );
    assert_flips_rejected(seed, &encoded, flip);
}

/// Every header byte flipped with several masks, and a bounded sample of
/// payload bytes flipped with `flip`, must fail to decode as a valid record.
fn assert_flips_rejected(seed: u32, encoded: &[u8], flip: u8) {
    assert!(encoded.len() >= RECORD_HEADER_BYTES);
    assert_ne!(flip, 0, "a zero mask changes nothing");
    let payload_len = encoded.len() - RECORD_HEADER_BYTES;
    let stride = payload_len.div_ceil(PAYLOAD_FLIPS_MAX).max(1);
    let header_flips =
        (0..RECORD_HEADER_BYTES).flat_map(|at| [flip, 0x01, 0x80, 0xff].map(|m| (at, m)));
    let payload_flips = (RECORD_HEADER_BYTES..encoded.len())
        .step_by(stride)
        .chain(encoded.len().checked_sub(1))
        .map(|at| (at, flip));
    let mut damaged = encoded.to_vec();
    for (at, mask) in header_flips.chain(payload_flips) {
        damaged[at] ^= mask;
        assert!(
            full_record(&damaged, seed).is_none(),
            "byte {at} ^ {mask:#04x} of a valid record still decodes (seed {seed:#010x})"
        );
        damaged[at] ^= mask;
    }
    assert_eq!(damaged, encoded);
}

/// Decodes `body` as a segment header; a valid one re-encodes to its bytes.
fn check_segment_header(body: &[u8]) {
    let Ok(header) = SegmentHeader::decode(body) else {
        return;
    };
    assert!(
        header.segment.0 >= 1 && header.first_lsn.0 >= 1,
        "{header:?}"
    );
    let encoded = header.encode();
    assert_eq!(
        &encoded[..SEGMENT_HEADER_USED_BYTES],
        &body[..SEGMENT_HEADER_USED_BYTES],
        "SegmentHeader encode(decode(bytes)) differs from the bytes"
    );
    assert!(
        encoded[SEGMENT_HEADER_USED_BYTES..].iter().all(|&b| b == 0),
        "a segment header's unused bytes are zero"
    );
}
