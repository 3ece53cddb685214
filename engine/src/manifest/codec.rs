//! The byte encoding of one manifest copy: pure functions, no I/O.
//!
//! A copy is a *frame* (magic, format version, declared length, sequence,
//! database id, ..., CRC-32 of every byte before it) around a
//! version-specific body. The frame layout is frozen for all versions, so a
//! copy written by a newer build can be recognised as intact-but-unsupported
//! rather than damaged. docs/FORMAT.md repeats this layout as a byte diagram.
//!
//! **Invariant:** `decode(&encode(m)) == Ok(m)` for every valid `m`; any
//! other input (short, damaged, or garbage) is an `Err` naming a byte offset,
//! never a panic and never a different manifest.

use std::fmt;

use super::content::{Manifest, STATE_FILE_NAME_MAX_BYTES, state_file_problem};
use crate::ids::{DatabaseId, Lsn, SegmentId};

/// The first eight bytes of every manifest copy.
pub const MAGIC: [u8; 8] = *b"ACTUMMNF";
/// The format version this build reads and writes.
pub const FORMAT_VERSION: u32 = 1;

// The frame: identical in every format version.
const MAGIC_OFFSET: usize = 0;
const VERSION_OFFSET: usize = MAGIC_OFFSET + MAGIC.len();
const LENGTH_OFFSET: usize = VERSION_OFFSET + 4;
pub(crate) const SEQUENCE_OFFSET: usize = LENGTH_OFFSET + 4;
pub(crate) const DATABASE_ID_OFFSET: usize = SEQUENCE_OFFSET + 8;
/// Bytes of the version-independent header that starts every copy.
pub(crate) const HEADER_LEN: usize = DATABASE_ID_OFFSET + 16;
const CRC_LEN: usize = 4;
const FRAME_LEN_MIN: usize = HEADER_LEN + CRC_LEN;
/// No copy of any version declares more bytes than this; a reader never
/// needs to read further.
pub const COPY_LEN_MAX: usize = 4096;

// The version 1 body.
pub(crate) const APPLIED_LSN_OFFSET: usize = HEADER_LEN;
const FIRST_LIVE_SEGMENT_OFFSET: usize = APPLIED_LSN_OFFSET + 8;
const FLAGS_OFFSET: usize = FIRST_LIVE_SEGMENT_OFFSET + 8;
const CLEAN_SHUTDOWN_LSN_OFFSET: usize = FLAGS_OFFSET + 4;
const STATE_FILE_LEN_OFFSET: usize = CLEAN_SHUTDOWN_LSN_OFFSET + 8;
const STATE_FILE_OFFSET: usize = STATE_FILE_LEN_OFFSET + 2;
/// Bit 0 of the flags: `clean_shutdown_lsn` is present. Other bits are zero.
const FLAG_CLEAN_SHUTDOWN: u32 = 1;
const V1_FIXED_LEN: usize = STATE_FILE_OFFSET + CRC_LEN;
const V1_LEN_MAX: usize = V1_FIXED_LEN + STATE_FILE_NAME_MAX_BYTES;

/// The size of a copy file as written by this build: every encoding is
/// zero-padded to it, so a copy file never changes size after creation.
pub const COPY_SLOT_BYTES: usize = 512;

const _: () = assert!(HEADER_LEN == 40, "FORMAT.md shows a 40-byte header");
const _: () = assert!(V1_FIXED_LEN == 74, "FORMAT.md shows a 74-byte fixed part");
const _: () = assert!(FRAME_LEN_MIN <= V1_FIXED_LEN);
const _: () = assert!(V1_LEN_MAX <= COPY_SLOT_BYTES);
const _: () = assert!(COPY_SLOT_BYTES <= COPY_LEN_MAX);
const _: () = assert!(STATE_FILE_NAME_MAX_BYTES <= u16::MAX as usize);
const _: () = assert!(COPY_LEN_MAX <= u32::MAX as usize);

/// Why a byte string is not a manifest copy this build can use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes are damaged, truncated or not a manifest copy at all.
    Invalid {
        /// Byte offset of the first problem found.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The frame is intact (magic, length and CRC check out) but the copy
    /// was written in a format version this build does not read.
    UnsupportedVersion {
        /// The version found.
        found: u32,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Invalid { offset, reason } => write!(f, "byte offset {offset}: {reason}"),
            DecodeError::UnsupportedVersion { found } => write!(
                f,
                "intact copy in format version {found}; this build reads version {FORMAT_VERSION}"
            ),
        }
    }
}

fn invalid(offset: usize, reason: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        offset: offset as u64,
        reason: reason.into(),
    }
}

/// The `N` bytes at `offset`, or an `Err` if `bytes` ends before them.
fn field<const N: usize>(bytes: &[u8], offset: usize) -> Result<[u8; N], DecodeError> {
    offset
        .checked_add(N)
        .and_then(|end| bytes.get(offset..end))
        .and_then(|slice| <[u8; N]>::try_from(slice).ok())
        .ok_or_else(|| {
            invalid(
                bytes.len(),
                format!(
                    "truncated: {} bytes, need {N} at offset {offset}",
                    bytes.len()
                ),
            )
        })
}

/// Encodes `manifest` as one copy: exactly the declared length, no padding.
///
/// Panics if `manifest` fails [`Manifest::validate`]; callers check first.
pub fn encode(manifest: &Manifest) -> Vec<u8> {
    if let Err(problem) = manifest.validate() {
        panic!("encoding an invalid manifest: {problem}");
    }
    let name = manifest.state_file.as_bytes();
    let len = V1_FIXED_LEN + name.len();
    assert!(len <= V1_LEN_MAX);
    let (flags, clean_lsn) = match manifest.clean_shutdown_lsn {
        Some(lsn) => (FLAG_CLEAN_SHUTDOWN, lsn.0),
        None => (0, 0),
    };
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&manifest.sequence.to_le_bytes());
    out.extend_from_slice(&manifest.database_id.0.to_le_bytes());
    assert_eq!(out.len(), HEADER_LEN);
    out.extend_from_slice(&manifest.applied_lsn.0.to_le_bytes());
    out.extend_from_slice(&manifest.first_live_segment.0.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&clean_lsn.to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    assert_eq!(out.len(), STATE_FILE_OFFSET);
    out.extend_from_slice(name);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(out.len(), len);
    out
}

/// Decodes the copy at the start of `bytes`; bytes past its declared length
/// are ignored (they are slot padding or a stale tail).
pub fn decode(bytes: &[u8]) -> Result<Manifest, DecodeError> {
    let len = check_frame(bytes)?;
    let version = u32::from_le_bytes(field(bytes, VERSION_OFFSET)?);
    if version != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion { found: version });
    }
    let manifest = decode_v1(bytes.get(..len).unwrap_or_default())?;
    assert_eq!(manifest.validate(), Ok(()));
    Ok(manifest)
}

/// Checks the version-independent frame and returns the declared length:
/// magic, a length within bounds and within `bytes`, and the CRC.
fn check_frame(bytes: &[u8]) -> Result<usize, DecodeError> {
    let magic: [u8; 8] = field(bytes, MAGIC_OFFSET)?;
    if magic != MAGIC {
        return Err(invalid(MAGIC_OFFSET, format!("wrong magic {magic:02x?}")));
    }
    let declared = u32::from_le_bytes(field(bytes, LENGTH_OFFSET)?) as usize;
    if !(FRAME_LEN_MIN..=COPY_LEN_MAX).contains(&declared) {
        return Err(invalid(
            LENGTH_OFFSET,
            format!("declared length {declared} is outside {FRAME_LEN_MIN}..={COPY_LEN_MAX}"),
        ));
    }
    if bytes.len() < declared {
        return Err(invalid(
            bytes.len(),
            format!(
                "truncated: {} bytes present, the copy declares {declared}",
                bytes.len()
            ),
        ));
    }
    let crc_offset = declared - CRC_LEN;
    let stored = u32::from_le_bytes(field(bytes, crc_offset)?);
    let computed = crc32fast::hash(bytes.get(..crc_offset).unwrap_or_default());
    if stored != computed {
        return Err(invalid(
            crc_offset,
            format!("CRC mismatch: stored {stored:#010x}, computed {computed:#010x}"),
        ));
    }
    Ok(declared)
}

/// Decodes a version 1 copy whose frame already checked out; `copy` is
/// exactly the declared length.
fn decode_v1(copy: &[u8]) -> Result<Manifest, DecodeError> {
    let name_len = u16::from_le_bytes(field(copy, STATE_FILE_LEN_OFFSET)?) as usize;
    if copy.len() != V1_FIXED_LEN + name_len {
        return Err(invalid(
            STATE_FILE_LEN_OFFSET,
            format!(
                "state file name of {name_len} bytes does not fit the declared length {}",
                copy.len()
            ),
        ));
    }
    let name_bytes = copy
        .get(STATE_FILE_OFFSET..STATE_FILE_OFFSET + name_len)
        .ok_or_else(|| invalid(STATE_FILE_OFFSET, "state file name truncated"))?;
    let state_file = std::str::from_utf8(name_bytes)
        .map_err(|error| invalid(STATE_FILE_OFFSET, format!("state file name: {error}")))?;
    if let Some(problem) = state_file_problem(state_file) {
        return Err(invalid(
            STATE_FILE_OFFSET,
            format!("state file name {problem}"),
        ));
    }
    let manifest = Manifest {
        database_id: DatabaseId(u128::from_le_bytes(field(copy, DATABASE_ID_OFFSET)?)),
        sequence: u64::from_le_bytes(field(copy, SEQUENCE_OFFSET)?),
        state_file: state_file.to_string(),
        applied_lsn: Lsn(u64::from_le_bytes(field(copy, APPLIED_LSN_OFFSET)?)),
        first_live_segment: SegmentId(u64::from_le_bytes(field(copy, FIRST_LIVE_SEGMENT_OFFSET)?)),
        clean_shutdown_lsn: decode_clean_shutdown(copy)?,
    };
    manifest
        .validate()
        .map_err(|problem| invalid(APPLIED_LSN_OFFSET, problem))?;
    Ok(manifest)
}

/// Decodes the flags and clean-shutdown LSN, insisting on the one canonical
/// encoding of each value.
fn decode_clean_shutdown(copy: &[u8]) -> Result<Option<Lsn>, DecodeError> {
    let flags = u32::from_le_bytes(field(copy, FLAGS_OFFSET)?);
    let lsn = u64::from_le_bytes(field(copy, CLEAN_SHUTDOWN_LSN_OFFSET)?);
    match flags {
        FLAG_CLEAN_SHUTDOWN => Ok(Some(Lsn(lsn))),
        0 if lsn == 0 => Ok(None),
        0 => Err(invalid(
            CLEAN_SHUTDOWN_LSN_OFFSET,
            "clean shutdown LSN set without its flag",
        )),
        _ => Err(invalid(FLAGS_OFFSET, format!("unknown flags {flags:#x}"))),
    }
}

/// Test helpers that build frames this build would never write.
#[cfg(test)]
pub(crate) mod testing {
    use super::{CRC_LEN, VERSION_OFFSET};

    /// Recomputes the CRC of a copy whose bytes a test edited on purpose.
    pub(crate) fn reseal(copy: &mut [u8]) {
        let crc_offset = copy.len() - CRC_LEN;
        let crc = crc32fast::hash(&copy[..crc_offset]);
        copy[crc_offset..].copy_from_slice(&crc.to_le_bytes());
    }

    /// Rewrites the version field and reseals: an intact copy from another
    /// format version.
    pub(crate) fn with_version(mut copy: Vec<u8>, version: u32) -> Vec<u8> {
        copy[VERSION_OFFSET..VERSION_OFFSET + 4].copy_from_slice(&version.to_le_bytes());
        reseal(&mut copy);
        copy
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{reseal, with_version};
    use super::*;
    use proptest::prelude::*;

    fn arb_manifest() -> impl Strategy<Value = Manifest> {
        (
            any::<u128>(),
            any::<u64>(),
            "[a-zA-Z0-9._-]{1,255}",
            any::<u64>(),
            1..=u64::MAX,
            proptest::option::of(any::<u64>()),
        )
            .prop_filter_map(
                "valid manifests only",
                |(id, seq, name, lsn, seg, clean)| {
                    let manifest = Manifest {
                        database_id: DatabaseId(id),
                        sequence: seq,
                        state_file: name,
                        applied_lsn: Lsn(lsn),
                        first_live_segment: SegmentId(seg),
                        clean_shutdown_lsn: clean.map(|extra| Lsn(lsn.saturating_add(extra))),
                    };
                    manifest.validate().is_ok().then_some(manifest)
                },
            )
    }

    fn sample() -> Manifest {
        Manifest {
            database_id: DatabaseId(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210),
            sequence: 42,
            state_file: "state.redb".to_string(),
            applied_lsn: Lsn(1000),
            first_live_segment: SegmentId(3),
            clean_shutdown_lsn: Some(Lsn(1200)),
        }
    }

    proptest! {
        #[test]
        fn round_trip_preserves_every_field(manifest in arb_manifest()) {
            let bytes = encode(&manifest);
            prop_assert_eq!(bytes.len(), V1_FIXED_LEN + manifest.state_file.len());
            prop_assert_eq!(decode(&bytes), Ok(manifest.clone()));
            // Slot padding or a stale tail after the declared length is ignored.
            let mut padded = bytes.clone();
            padded.resize(COPY_SLOT_BYTES, 0xee);
            prop_assert_eq!(decode(&padded), Ok(manifest));
        }

        #[test]
        fn every_truncation_is_an_error(manifest in arb_manifest(), cut in any::<prop::sample::Index>()) {
            let bytes = encode(&manifest);
            let keep = cut.index(bytes.len());
            let result = decode(&bytes[..keep]);
            prop_assert!(matches!(result, Err(DecodeError::Invalid { .. })), "{:?}", result);
        }

        #[test]
        fn every_single_byte_change_is_an_error(
            manifest in arb_manifest(),
            at in any::<prop::sample::Index>(),
            xor in 1u8..=255,
        ) {
            let mut bytes = encode(&manifest);
            let index = at.index(bytes.len());
            bytes[index] ^= xor;
            let result = decode(&bytes);
            prop_assert!(matches!(result, Err(DecodeError::Invalid { .. })), "{:?}", result);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode(&bytes);
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&bytes);
            let _ = decode(&framed);
        }
    }

    #[test]
    fn every_byte_change_and_truncation_of_a_sample_is_an_error() {
        let bytes = encode(&sample());
        for keep in 0..bytes.len() {
            assert!(decode(&bytes[..keep]).is_err(), "prefix of {keep} bytes");
        }
        for index in 0..bytes.len() {
            for xor in 1..=255u8 {
                let mut damaged = bytes.clone();
                damaged[index] ^= xor;
                assert!(
                    matches!(decode(&damaged), Err(DecodeError::Invalid { .. })),
                    "byte {index} ^ {xor:#x}"
                );
            }
        }
    }

    #[test]
    fn the_layout_matches_the_diagram_in_format_md() {
        let bytes = encode(&sample());
        assert_eq!(&bytes[0..8], b"ACTUMMNF");
        assert_eq!(bytes[8..12], 1u32.to_le_bytes());
        assert_eq!(bytes[12..16], 84u32.to_le_bytes());
        assert_eq!(bytes[16..24], 42u64.to_le_bytes());
        assert_eq!(bytes[24..40], sample().database_id.0.to_le_bytes());
        assert_eq!(bytes[40..48], 1000u64.to_le_bytes());
        assert_eq!(bytes[48..56], 3u64.to_le_bytes());
        assert_eq!(bytes[56..60], 1u32.to_le_bytes());
        assert_eq!(bytes[60..68], 1200u64.to_le_bytes());
        assert_eq!(bytes[68..70], 10u16.to_le_bytes());
        assert_eq!(&bytes[70..80], b"state.redb");
        assert_eq!(bytes[80..84], crc32fast::hash(&bytes[..80]).to_le_bytes());
    }

    #[test]
    fn errors_name_the_offset_of_the_damage() {
        let bytes = encode(&sample());
        let offset_of = |bytes: &[u8]| match decode(bytes) {
            Err(DecodeError::Invalid { offset, .. }) => offset,
            other => panic!("expected Invalid, got {other:?}"),
        };
        assert_eq!(offset_of(&[]), 0);
        assert_eq!(offset_of(&bytes[..50]), 50);
        let mut wrong_magic = bytes.clone();
        wrong_magic[0] = b'X';
        assert_eq!(offset_of(&wrong_magic), 0);
        let mut flipped = bytes.clone();
        flipped[APPLIED_LSN_OFFSET] ^= 1;
        assert_eq!(offset_of(&flipped), (bytes.len() - CRC_LEN) as u64);
        let mut huge = bytes.clone();
        huge[LENGTH_OFFSET..LENGTH_OFFSET + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(offset_of(&huge), LENGTH_OFFSET as u64);
    }

    #[test]
    fn an_intact_frame_of_another_version_is_unsupported_not_invalid() {
        let bytes = with_version(encode(&sample()), 2);
        assert_eq!(
            decode(&bytes),
            Err(DecodeError::UnsupportedVersion { found: 2 })
        );
        // Without a matching CRC the same version field is just damage.
        let mut damaged = encode(&sample());
        damaged[VERSION_OFFSET] = 2;
        assert!(matches!(decode(&damaged), Err(DecodeError::Invalid { .. })));
    }

    #[test]
    fn resealed_but_non_canonical_bodies_are_rejected() {
        let base = encode(&sample());
        let mut unknown_flag = base.clone();
        unknown_flag[FLAGS_OFFSET] = 0b10;
        reseal(&mut unknown_flag);
        assert!(decode(&unknown_flag).is_err());

        let mut lsn_without_flag = base.clone();
        lsn_without_flag[FLAGS_OFFSET] = 0;
        reseal(&mut lsn_without_flag);
        assert!(decode(&lsn_without_flag).is_err());

        let mut bad_name = base.clone();
        bad_name[STATE_FILE_OFFSET] = b'/';
        reseal(&mut bad_name);
        assert!(decode(&bad_name).is_err());

        let mut segment_zero = base;
        segment_zero[FIRST_LIVE_SEGMENT_OFFSET..FIRST_LIVE_SEGMENT_OFFSET + 8].fill(0);
        reseal(&mut segment_zero);
        assert!(decode(&segment_zero).is_err());
    }
}
