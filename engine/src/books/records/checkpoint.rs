//! Checkpoints: the named parts a run saves and the meta record that points
//! at their blobs, and the schema check a loader makes. The rule that saves
//! one and the loaders that read one back are in `rules/checkpoint.rs`.
//!
//! A part is stored whole, as one blob named by its digest, or, when it was
//! saved in append form, as a list of chunks (each a blob) whose
//! concatenation is the part; the metadata names the chunks and a digest of
//! the chunk list (layout 3; layout 2 named the whole bytes), which a load
//! checks again. A part that asks (`Part::held_inline`) and is at most
//! `CHECKPOINT_INLINE_BYTES_MAX` is held in the metadata itself (layout 4),
//! with no blob: a load of a run's small parts reads its metadata rows,
//! which lie side by side, and not one blob per part wherever the blob
//! store put it.
//!
//! **Invariant:** a chunked part's chunk sizes add up to its size, and it has
//! from 2 to `CHECKPOINT_PART_CHUNKS_MAX` chunks; a part held inline has no
//! chunks, its size is its bytes' length, at most
//! `CHECKPOINT_INLINE_BYTES_MAX`; the metadata decodes from every layout
//! (docs/FORMAT.md, "Checkpoint metadata").

use std::fmt;

use serde::de::{self, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::books::base::digest::Digest;
use crate::books::base::ids::{FencingToken, RunId};
use crate::books::base::limits::{CHECKPOINT_INLINE_BYTES_MAX, CHECKPOINT_PART_CHUNKS_MAX};
use crate::error::{Error, Result};

/// One named part of a checkpoint, as the caller hands it in
/// (`messages`, `plan`, `cursor`, ...), or as a load returns it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    /// The part's name, unique within the checkpoint.
    pub name: String,
    /// Its bytes, encoded by the caller: the whole part, or, with
    /// `extends`, only the bytes that follow the base's.
    pub bytes: Vec<u8>,
    /// `Some` saves the part in append form: the bytes of the named part of
    /// an earlier checkpoint of the same run, followed by `bytes`; only the
    /// new bytes are written. A loaded part is always whole (`None`).
    pub extends: Option<PartBase>,
    /// Asks the save to hold the part's whole value in the checkpoint's
    /// metadata, in no blob, if it is at most `CHECKPOINT_INLINE_BYTES_MAX`
    /// (else it is stored as if not asked). For a small part that changes
    /// with every checkpoint (a journal entry, a cursor): a load reads it
    /// from the run's metadata rows, which lie side by side, not from a blob
    /// wherever the blob store put it; but it is never shared by digest, so
    /// an unchanged one is written again with each checkpoint. A loaded
    /// part has it `false`.
    pub inline: bool,
}

impl Part {
    /// A part given whole.
    pub fn whole(name: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Part {
        Part {
            name: name.into(),
            bytes: bytes.into(),
            extends: None,
            inline: false,
        }
    }

    /// A part in append form: part `base.name` of checkpoint `base.version`
    /// of the same run, followed by `bytes`.
    pub fn append(name: impl Into<String>, base: PartBase, bytes: impl Into<Vec<u8>>) -> Part {
        Part {
            name: name.into(),
            bytes: bytes.into(),
            extends: Some(base),
            inline: false,
        }
    }

    /// This part, asking to be held in the checkpoint's metadata if its
    /// whole value fits (`inline`).
    #[must_use]
    pub fn held_inline(self) -> Part {
        Part {
            inline: true,
            ..self
        }
    }
}

/// The part of an earlier checkpoint an appended part starts with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartBase {
    /// The version of the earlier checkpoint, of the same run.
    pub version: u64,
    /// The name of the part in it.
    pub name: String,
}

impl PartBase {
    /// Part `name` of checkpoint `version`.
    pub fn new(version: u64, name: impl Into<String>) -> PartBase {
        PartBase {
            version,
            name: name.into(),
        }
    }
}

/// One stored blob of a part: a chunk, or the whole part.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkRef {
    /// The digest of its bytes (the blob table key).
    pub digest: Digest,
    /// Its size in bytes.
    pub size_bytes: u64,
}

/// A part as the metadata records it: by digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    /// The part's name.
    pub name: String,
    /// The digest of its whole bytes: the blob table key of a part stored
    /// whole, and what a load of a chunked part checks the concatenation
    /// against.
    pub digest: Digest,
    /// Its whole size in bytes.
    pub size_bytes: u64,
    /// Empty for a part stored whole; otherwise the chunks whose
    /// concatenation, in order, is the part (2 to
    /// `CHECKPOINT_PART_CHUNKS_MAX` of them). Since payload version 10 and
    /// state schema 10.
    pub chunks: Vec<ChunkRef>,
    /// The part's bytes when the metadata holds them itself: a part of at
    /// most `CHECKPOINT_INLINE_BYTES_MAX`, stored in no blob (`chunks` is
    /// empty and `digest` is still the digest of the bytes, which a load
    /// checks). `None` for a part stored in blobs. Since payload version 12
    /// and state schema 14 (metadata layout 4).
    pub inline: Option<Vec<u8>>,
}

impl PartRef {
    /// The blobs the part is stored in, in order: its chunks, or the one
    /// blob of the whole part; none for a part held inline.
    pub fn blobs(&self) -> impl Iterator<Item = ChunkRef> + '_ {
        let whole = (self.chunks.is_empty() && self.inline.is_none()).then_some(ChunkRef {
            digest: self.digest,
            size_bytes: self.size_bytes,
        });
        whole.into_iter().chain(self.chunks.iter().copied())
    }

    /// How many blobs a load of the part reads (none if it is held inline).
    pub fn chunk_count(&self) -> usize {
        if self.inline.is_some() {
            return 0;
        }
        self.chunks.len().max(1)
    }

    /// Why the chunk list, or the bytes held inline, cannot be this part's,
    /// if they cannot.
    fn problem(&self) -> Option<String> {
        if let Some(bytes) = &self.inline {
            let fits = bytes.len() <= CHECKPOINT_INLINE_BYTES_MAX;
            return (!self.chunks.is_empty() || bytes.len() as u64 != self.size_bytes || !fits)
                .then(|| {
                    format!(
                        "part {} holds {} bytes inline for a size of {}, with {} chunks; an \
                         inline part has no chunks and at most {CHECKPOINT_INLINE_BYTES_MAX} \
                         bytes, its size",
                        self.name,
                        bytes.len(),
                        self.size_bytes,
                        self.chunks.len()
                    )
                });
        }
        if self.chunks.is_empty() {
            return None;
        }
        if self.chunks.len() < 2 || self.chunks.len() > CHECKPOINT_PART_CHUNKS_MAX {
            return Some(format!(
                "part {} has {} chunks; a chunked part has 2 to {CHECKPOINT_PART_CHUNKS_MAX}",
                self.name,
                self.chunks.len()
            ));
        }
        let sum = self
            .chunks
            .iter()
            .try_fold(0u64, |sum, c| sum.checked_add(c.size_bytes));
        (sum != Some(self.size_bytes)).then(|| {
            format!(
                "the chunks of part {} do not add up to its {} bytes",
                self.name, self.size_bytes
            )
        })
    }
}

/// A part as layout 1 of the metadata recorded it (payload versions 1 to 9,
/// state schemas 1 to 9): always whole.
#[derive(Deserialize)]
struct PartRefV1 {
    name: String,
    digest: Digest,
    size_bytes: u64,
}

impl From<PartRefV1> for PartRef {
    fn from(old: PartRefV1) -> PartRef {
        PartRef {
            name: old.name,
            digest: old.digest,
            size_bytes: old.size_bytes,
            chunks: Vec::new(),
            inline: None,
        }
    }
}

/// A part as layouts 2 and 3 of the metadata recorded it (payload versions
/// 10 and 11, state schemas 10 to 13): in blobs, whole or in chunks.
#[derive(Deserialize)]
struct PartRefV3 {
    name: String,
    digest: Digest,
    size_bytes: u64,
    chunks: Vec<ChunkRef>,
}

impl From<PartRefV3> for PartRef {
    fn from(old: PartRefV3) -> PartRef {
        PartRef {
            name: old.name,
            digest: old.digest,
            size_bytes: old.size_bytes,
            chunks: old.chunks,
            inline: None,
        }
    }
}

/// One checkpoint's metadata. Its encoding is hand-written (below) so that
/// both layouts decode: see docs/FORMAT.md, "Checkpoint metadata".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointMeta {
    /// The run checkpointed.
    pub run: RunId,
    /// 1 for the run's first checkpoint, then +1 each.
    pub version: u64,
    /// The caller's schema version of the parts.
    pub schema_version: u32,
    /// The parts, in the order the caller gave them.
    pub parts: Vec<PartRef>,
    /// When it was saved, ms since the epoch.
    pub saved_ms: u64,
    /// The fencing token it was saved under.
    pub token: FencingToken,
}

/// The layout this build writes. Layout 1 (payload versions 1 to 9, state
/// schemas 1 to 9) began with the run id; layouts 2 to 4 begin with an
/// empty string, which no run id is, then this number, so a decoder tells
/// them apart by their first field. Layouts 2 and 3 encode alike; a chunked
/// part's digest names its whole bytes in layout 2 and its chunk list in
/// layout 3 (`digest_of_chunks`), so an append need not read its base.
/// Layout 4 is layout 3 whose parts end with the bytes held inline
/// (`PartRef::inline`).
pub const META_LAYOUT: u8 = 4;

/// The layout whose parts are all in blobs, chunked parts carrying the
/// digest of their chunk list; it still decodes.
const META_LAYOUT_CHUNK_DIGEST: u8 = 3;

/// The layout whose chunked parts carry the digest of their whole bytes; it
/// still decodes.
const META_LAYOUT_WHOLE_DIGEST: u8 = 2;

/// Fields a metadata of layout 2 to 4 encodes: the empty marker, the
/// layout, and the six fields of the struct.
const META_FIELDS_V2: usize = 8;

impl Serialize for CheckpointMeta {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut fields = serializer.serialize_tuple(META_FIELDS_V2)?;
        fields.serialize_element("")?;
        fields.serialize_element(&META_LAYOUT)?;
        fields.serialize_element(&self.run)?;
        fields.serialize_element(&self.version)?;
        fields.serialize_element(&self.schema_version)?;
        fields.serialize_element(&self.parts)?;
        fields.serialize_element(&self.saved_ms)?;
        fields.serialize_element(&self.token)?;
        fields.end()
    }
}

impl<'de> Deserialize<'de> for CheckpointMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        deserializer.deserialize_tuple(META_FIELDS_V2, MetaVisitor)
    }
}

struct MetaVisitor;

fn field<'de, T: Deserialize<'de>, A: SeqAccess<'de>>(
    seq: &mut A,
    index: usize,
) -> std::result::Result<T, A::Error> {
    seq.next_element()?
        .ok_or_else(|| de::Error::invalid_length(index, &"the fields of checkpoint metadata"))
}

impl<'de> Visitor<'de> for MetaVisitor {
    type Value = CheckpointMeta;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("checkpoint metadata, layout 1 to 4")
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> std::result::Result<CheckpointMeta, A::Error> {
        // Layout 1 begins with the run id, layouts 2 to 4 with an empty
        // marker.
        let first: String = field(&mut seq, 0)?;
        let layout = if first.is_empty() {
            field(&mut seq, 1)?
        } else {
            1
        };
        let run = if layout == 1 {
            RunId::new(first).map_err(de::Error::custom)?
        } else {
            if ![
                META_LAYOUT_WHOLE_DIGEST,
                META_LAYOUT_CHUNK_DIGEST,
                META_LAYOUT,
            ]
            .contains(&layout)
            {
                return Err(de::Error::custom(format!(
                    "checkpoint metadata layout {layout}; this build reads layouts 1 to \
                     {META_LAYOUT}"
                )));
            }
            field(&mut seq, 2)?
        };
        let version: u64 = field(&mut seq, 3)?;
        let schema_version: u32 = field(&mut seq, 4)?;
        let parts: Vec<PartRef> = match layout {
            1 => {
                let old: Vec<PartRefV1> = field(&mut seq, 5)?;
                old.into_iter().map(PartRef::from).collect()
            }
            META_LAYOUT => field(&mut seq, 5)?,
            _ => {
                let old: Vec<PartRefV3> = field(&mut seq, 5)?;
                old.into_iter().map(PartRef::from).collect()
            }
        };
        if let Some(problem) = parts.iter().find_map(PartRef::problem) {
            return Err(de::Error::custom(format!(
                "checkpoint {version} of run {run}: {problem}"
            )));
        }
        Ok(CheckpointMeta {
            run,
            version,
            schema_version,
            parts,
            saved_ms: field(&mut seq, 6)?,
            token: field(&mut seq, 7)?,
        })
    }
}

/// A loaded checkpoint: its metadata and the parts' bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedCheckpoint {
    /// The metadata.
    pub meta: CheckpointMeta,
    /// The parts, in metadata order.
    pub parts: Vec<Part>,
}

/// Refuses a checkpoint whose schema is not `expected_schema`. A caller with
/// a migration registered for `meta.schema_version` runs it instead of
/// calling this.
pub fn check_schema(meta: &CheckpointMeta, expected_schema: u32) -> Result<()> {
    if meta.schema_version == expected_schema {
        return Ok(());
    }
    Err(Error::SchemaMismatch {
        run: meta.run.clone(),
        found: meta.schema_version,
        expected: expected_schema,
    })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::base::digest::{digest_of, digest_of_chunks};

    /// Layout 1 as payload versions 1 to 9 and state schemas 1 to 9 wrote it.
    #[derive(Serialize)]
    struct MetaV1 {
        run: RunId,
        version: u64,
        schema_version: u32,
        parts: Vec<(String, Digest, u64)>,
        saved_ms: u64,
        token: FencingToken,
    }

    fn chunked() -> CheckpointMeta {
        let chunk = |bytes: &[u8]| ChunkRef {
            digest: digest_of(bytes),
            size_bytes: bytes.len() as u64,
        };
        CheckpointMeta {
            run: RunId::new("r").unwrap(),
            version: 2,
            schema_version: 1,
            parts: vec![PartRef {
                name: "messages".into(),
                digest: digest_of_chunks([b"he".as_slice(), b"llo"].map(|b| {
                    let c = chunk(b);
                    (c.digest, c.size_bytes)
                })),
                size_bytes: 5,
                chunks: vec![chunk(b"he"), chunk(b"llo")],
                inline: None,
            }],
            saved_ms: 7,
            token: FencingToken(3),
        }
    }

    #[test]
    fn metadata_of_layout_1_still_decodes_as_whole_parts() {
        let old = MetaV1 {
            run: RunId::new("r").unwrap(),
            version: 1,
            schema_version: 4,
            parts: vec![("plan".into(), digest_of(b"p"), 1)],
            saved_ms: 9,
            token: FencingToken(2),
        };
        let bytes = postcard::to_stdvec(&old).unwrap();
        let meta: CheckpointMeta = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(meta.run.as_str(), "r");
        assert_eq!((meta.version, meta.schema_version), (1, 4));
        assert_eq!((meta.saved_ms, meta.token), (9, FencingToken(2)));
        assert_eq!(
            meta.parts,
            [PartRef {
                name: "plan".into(),
                digest: digest_of(b"p"),
                size_bytes: 1,
                chunks: Vec::new(),
                inline: None,
            }]
        );
        // What this build writes is layout 4, which round-trips.
        let now = postcard::to_stdvec(&meta).unwrap();
        assert_eq!(now[..2], [0, META_LAYOUT]);
        assert_eq!(postcard::from_bytes::<CheckpointMeta>(&now).unwrap(), meta);
    }

    #[test]
    fn chunked_metadata_round_trips_and_damaged_chunk_lists_are_refused() {
        let meta = chunked();
        let bytes = postcard::to_stdvec(&meta).unwrap();
        assert_eq!(
            postcard::from_bytes::<CheckpointMeta>(&bytes).unwrap(),
            meta
        );
        let blobs: Vec<ChunkRef> = meta.parts[0].blobs().collect();
        assert_eq!(blobs, meta.parts[0].chunks);
        let mut short = meta.clone();
        short.parts[0].size_bytes = 4;
        let mut single = meta.clone();
        single.parts[0].chunks.truncate(1);
        single.parts[0].size_bytes = 2;
        for bad in [short, single] {
            let bytes = postcard::to_stdvec(&bad).unwrap();
            let err = postcard::from_bytes::<CheckpointMeta>(&bytes).unwrap_err();
            assert!(!err.to_string().is_empty());
        }
        let mut other_layout = bytes.clone();
        other_layout[1] = META_LAYOUT + 1;
        assert!(postcard::from_bytes::<CheckpointMeta>(&other_layout).is_err());
        // Layouts 2 and 3 encode as layout 4 without the inline option (a
        // `None`, one zero byte, ends each part), and still decode.
        assert_eq!(
            bytes[bytes.len() - 2..],
            [7, 3],
            "saved_ms and token end it"
        );
        let none_at = bytes.len() - 3;
        assert_eq!(bytes[none_at], 0, "the part's inline option is None");
        let old = [&bytes[..none_at], &bytes[none_at + 1..]].concat();
        for layout in [META_LAYOUT_WHOLE_DIGEST, META_LAYOUT_CHUNK_DIGEST] {
            let mut old = old.clone();
            old[1] = layout;
            assert_eq!(postcard::from_bytes::<CheckpointMeta>(&old).unwrap(), meta);
        }
        for cut in 0..bytes.len() {
            assert!(postcard::from_bytes::<CheckpointMeta>(&bytes[..cut]).is_err());
        }
    }

    fn held(bytes: &[u8]) -> CheckpointMeta {
        CheckpointMeta {
            run: RunId::new("r").unwrap(),
            version: 1,
            schema_version: 1,
            parts: vec![PartRef {
                name: "cursor".into(),
                digest: digest_of(bytes),
                size_bytes: bytes.len() as u64,
                chunks: Vec::new(),
                inline: Some(bytes.to_vec()),
            }],
            saved_ms: 7,
            token: FencingToken(3),
        }
    }

    #[test]
    fn a_part_held_inline_round_trips_names_no_blob_and_must_fit() {
        let meta = held(b"step 4");
        let bytes = postcard::to_stdvec(&meta).unwrap();
        assert_eq!(bytes[..2], [0, META_LAYOUT]);
        assert_eq!(
            postcard::from_bytes::<CheckpointMeta>(&bytes).unwrap(),
            meta
        );
        assert_eq!(meta.parts[0].blobs().count(), 0);
        assert_eq!(meta.parts[0].chunk_count(), 0);
        // The largest that fits decodes; one byte more, a size that is not
        // the bytes' length, or chunks beside the bytes are refused.
        let largest = held(&[7; CHECKPOINT_INLINE_BYTES_MAX]);
        let encoded = postcard::to_stdvec(&largest).unwrap();
        assert_eq!(
            postcard::from_bytes::<CheckpointMeta>(&encoded).unwrap(),
            largest
        );
        let too_big = held(&[7; CHECKPOINT_INLINE_BYTES_MAX + 1]);
        let mut other_size = meta.clone();
        other_size.parts[0].size_bytes = 5;
        let mut with_chunks = meta.clone();
        with_chunks.parts[0].chunks = chunked().parts[0].chunks.clone();
        with_chunks.parts[0].size_bytes = 5;
        for bad in [too_big, other_size, with_chunks] {
            let bytes = postcard::to_stdvec(&bad).unwrap();
            assert!(postcard::from_bytes::<CheckpointMeta>(&bytes).is_err());
            assert!(bad.parts[0].problem().is_some_and(|p| p.contains("inline")));
        }
    }
}
