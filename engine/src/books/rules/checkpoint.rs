//! Checkpoints of agent state: metadata per (run, version) naming caller-
//! named parts by content digest, with the part bytes stored once in a blob
//! table, so saving an unchanged large state writes only its metadata.
//!
//! A part saved in append form (the bytes of a part of an earlier
//! checkpoint of the run, followed by new bytes) writes only its new bytes,
//! as one more chunk: a message list that grows by a message per step
//! writes each message once, not the whole list at every step. Past
//! [`CHECKPOINT_PART_CHUNKS_MAX`] chunks the save stores the whole value as
//! one blob again, so a load reads a bounded number of blobs.
//!
//! A part that asks for it (`Part::inline`) and whose whole value is at
//! most [`CHECKPOINT_INLINE_BYTES_MAX`] is held in the metadata itself, in
//! no blob: an append on such a base writes the base's bytes and the new
//! ones again (inline if asked and they still fit, else as one blob), which
//! costs at most that many bytes and reads no blob.
//!
//! Invariants: a run's checkpoint versions are 1, 2, 3, ... with no gaps;
//! every digest a checkpoint names (each chunk of a chunked part) is in the
//! blob table before the checkpoint is (the blob ops precede the checkpoint
//! op in one decision); a load checks the schema version and re-checks
//! every blob's digest and every chunked part's whole digest.

use std::collections::BTreeSet;

use crate::books::base::digest::{Digest, digest_of, digest_of_chunks};
use crate::books::base::ids::{RunId, validate_name};
use crate::books::base::limits::{
    CHECKPOINT_INLINE_BYTES_MAX, CHECKPOINT_PART_BYTES_MAX, CHECKPOINT_PART_CHUNKS_MAX,
    CHECKPOINT_PARTS_MAX, CHECKPOINT_TOTAL_BYTES_MAX, check_size,
};
use crate::books::records::checkpoint::{
    CheckpointMeta, ChunkRef, LoadedCheckpoint, Part, PartBase, PartRef, check_schema,
};
use crate::books::rules::checks::{check_live, existing};
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::SaveCheckpoint;
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

/// Checks what a save can check without the books: part names and count,
/// and that no part's given bytes alone pass the part limit. The limits on
/// a part's whole value are checked once its base is known.
fn check_parts(cmd: &SaveCheckpoint) -> Result<()> {
    let run = &cmd.run;
    check_size(
        || format!("part count of a checkpoint of run {run}"),
        cmd.parts.len(),
        CHECKPOINT_PARTS_MAX,
    )?;
    let mut names = BTreeSet::new();
    for part in &cmd.parts {
        validate_name("checkpoint part", &part.name)?;
        if !names.insert(part.name.as_str()) {
            return Err(Error::InvalidCommand {
                reason: format!("checkpoint of run {run} names part {} twice", part.name),
            });
        }
        let name = &part.name;
        check_size(
            || format!("checkpoint part {name} of run {run}"),
            part.bytes.len(),
            CHECKPOINT_PART_BYTES_MAX,
        )?;
    }
    Ok(())
}

/// Checks each part's whole size, and their sum, against the limits.
fn check_whole_sizes(run: &RunId, refs: &[PartRef]) -> Result<()> {
    let mut total_bytes = 0usize;
    for part in refs {
        let size = usize::try_from(part.size_bytes).unwrap_or(usize::MAX);
        let name = &part.name;
        check_size(
            || format!("checkpoint part {name} of run {run}"),
            size,
            CHECKPOINT_PART_BYTES_MAX,
        )?;
        total_bytes = total_bytes.saturating_add(size);
    }
    check_size(
        || format!("checkpoint of run {run}"),
        total_bytes,
        CHECKPOINT_TOTAL_BYTES_MAX,
    )
}

/// The blobs one save writes, and the tallies its answer reports: each part
/// stores one blob (its whole bytes, its new chunk, or its compacted
/// value), reuses one already stored, or is held inline.
#[derive(Default)]
struct BlobPlan {
    ops: Vec<Op>,
    written: BTreeSet<Digest>,
    bytes_written: u64,
    blobs_reused: usize,
    inlined: usize,
}

impl BlobPlan {
    /// Stores `bytes` as one blob unless the books or this save hold it.
    fn store(&mut self, state: &dyn BooksRead, bytes: &[u8]) -> ChunkRef {
        let digest = digest_of(bytes);
        if self.written.contains(&digest) || state.blob_exists(&digest) {
            self.blobs_reused += 1;
        } else {
            self.written.insert(digest);
            self.bytes_written += bytes.len() as u64;
            self.ops.push(Op::BlobPut {
                digest,
                bytes: bytes.to_vec(),
            });
        }
        ChunkRef {
            digest,
            size_bytes: bytes.len() as u64,
        }
    }

    /// Part `name` with the whole value `bytes`: held inline if `inline`
    /// asks and it is at most `CHECKPOINT_INLINE_BYTES_MAX`, else stored as
    /// one blob (or reusing it).
    fn whole(&mut self, state: &dyn BooksRead, name: &str, bytes: &[u8], inline: bool) -> PartRef {
        if inline && bytes.len() <= CHECKPOINT_INLINE_BYTES_MAX {
            self.inlined += 1;
            return PartRef {
                name: name.to_owned(),
                digest: digest_of(bytes),
                size_bytes: bytes.len() as u64,
                chunks: Vec::new(),
                inline: Some(bytes.to_vec()),
            };
        }
        let blob = self.store(state, bytes);
        PartRef {
            name: name.to_owned(),
            digest: blob.digest,
            size_bytes: blob.size_bytes,
            chunks: Vec::new(),
            inline: None,
        }
    }
}

/// Decides `SaveCheckpoint`: one blob op per part stored in a blob the books
/// lack (each digest once), then the metadata op, which holds the small
/// parts itself.
pub(crate) fn decide_save(
    state: &dyn BooksRead,
    cmd: &SaveCheckpoint,
    now_ms: u64,
) -> Result<Decided> {
    check_parts(cmd)?;
    let run = existing(state, &cmd.run)?;
    check_live(&run, &cmd.guard, now_ms)?;
    let version = state
        .checkpoint_latest(&cmd.run)
        .map_or(1, |m| m.version + 1);
    let mut plan = BlobPlan::default();
    let mut refs = Vec::with_capacity(cmd.parts.len());
    for part in &cmd.parts {
        let part_ref = match &part.extends {
            None => plan.whole(state, &part.name, &part.bytes, part.inline),
            Some(base) => append_ref(state, &mut plan, &cmd.run, part, base)?,
        };
        assert!(part_ref.chunk_count() <= CHECKPOINT_PART_CHUNKS_MAX);
        refs.push(part_ref);
    }
    check_whole_sizes(&cmd.run, &refs)?;
    assert_eq!(
        plan.ops.len() + plan.blobs_reused + plan.inlined,
        cmd.parts.len()
    );
    let meta = CheckpointMeta {
        run: cmd.run.clone(),
        version,
        schema_version: cmd.schema_version,
        parts: refs,
        saved_ms: now_ms,
        token: cmd.guard.token,
    };
    let answer = Answer::CheckpointSaved {
        run: cmd.run.clone(),
        version,
        blobs_written: plan.ops.len(),
        bytes_written: plan.bytes_written,
        blobs_reused: plan.blobs_reused,
        parts_inline: plan.inlined,
    };
    let mut ops = plan.ops;
    ops.push(Op::CheckpointSaved { meta });
    Ok(Decided { ops, answer })
}

/// The metadata of the part an appended part extends; `NotFound` names the
/// run, the version and the part when there is no such checkpoint or part.
fn base_of(state: &dyn BooksRead, run: &RunId, part: &Part, base: &PartBase) -> Result<PartRef> {
    let extended = || format!("which part {} of a new checkpoint extends", part.name);
    if let Some(found) = state.checkpoint_part(run, base) {
        return Ok(found);
    }
    let what = match state.checkpoint_at(run, base.version) {
        None => format!("checkpoint {} of run {run}, {}", base.version, extended()),
        Some(_) => format!(
            "part {} of checkpoint {} of run {run}, {}",
            base.name,
            base.version,
            extended()
        ),
    };
    Err(Error::NotFound { what })
}

/// The metadata of `part` saved in append form on `base`: the base's blobs
/// then a chunk of the new bytes, or, past the chunk limit, the whole value
/// stored as one blob; on a base held inline, the whole value (inline if
/// asked and it fits).
fn append_ref(
    state: &dyn BooksRead,
    plan: &mut BlobPlan,
    run: &RunId,
    part: &Part,
    base: &PartBase,
) -> Result<PartRef> {
    let base_ref = base_of(state, run, part, base)?;
    let size_bytes = base_ref.size_bytes.saturating_add(part.bytes.len() as u64);
    check_size(
        || format!("checkpoint part {} of run {run}", part.name),
        usize::try_from(size_bytes).unwrap_or(usize::MAX),
        CHECKPOINT_PART_BYTES_MAX,
    )?;
    if let Some(base_bytes) = &base_ref.inline {
        // The base is in its metadata: the whole value is at most the
        // inline limit plus the new bytes, and no blob is read.
        let mut whole = base_bytes.clone();
        whole.extend_from_slice(&part.bytes);
        assert_eq!(whole.len() as u64, size_bytes);
        return Ok(plan.whole(state, &part.name, &whole, part.inline));
    }
    if part.bytes.is_empty() {
        // Nothing new: the part is its base, under its own name.
        plan.blobs_reused += 1;
        return Ok(PartRef {
            name: part.name.clone(),
            ..base_ref
        });
    }
    if base_ref.size_bytes == 0 {
        // An empty base adds no bytes: the part is its new bytes, whole,
        // with no empty chunk in front.
        return Ok(plan.whole(state, &part.name, &part.bytes, part.inline));
    }
    if base_ref.chunk_count() + 1 > CHECKPOINT_PART_CHUNKS_MAX {
        // Past the chunk limit the value is stored whole: the one append in
        // `CHECKPOINT_PART_CHUNKS_MAX` that reads its base (its digests
        // checked on the way).
        let mut whole = read_part(state, run, base.version, &base_ref)?;
        whole.extend_from_slice(&part.bytes);
        assert_eq!(whole.len() as u64, size_bytes);
        return Ok(plan.whole(state, &part.name, &whole, part.inline));
    }
    // The digest names the chunk list (layout 3), so the base is not read:
    // an append costs its new bytes, whatever the value's size.
    let mut chunks: Vec<ChunkRef> = base_ref.blobs().collect();
    chunks.push(plan.store(state, &part.bytes));
    assert!(chunks.len() >= 2);
    Ok(PartRef {
        name: part.name.clone(),
        digest: chunk_list_digest(&chunks),
        size_bytes,
        chunks,
        inline: None,
    })
}

/// The digest a chunked part carries (metadata layout 3).
fn chunk_list_digest(chunks: &[ChunkRef]) -> Digest {
    digest_of_chunks(chunks.iter().map(|c| (c.digest, c.size_bytes)))
}

/// Loads the newest checkpoint of `run` (`None` if it has none), checking
/// its schema and every part's digest.
pub fn load_latest(
    state: &(impl BooksRead + ?Sized),
    run: &RunId,
    expected_schema: u32,
) -> Result<Option<LoadedCheckpoint>> {
    let Some(meta) = state.checkpoint_latest(run) else {
        return Ok(None);
    };
    check_schema(&meta, expected_schema)?;
    load_parts(state, meta).map(Some)
}

/// Reads the parts `meta` names from the blob table, checking each blob's
/// digest and size and each chunked part's whole digest (the schema is the
/// caller's business: see [`check_schema`]).
pub fn load_parts(
    state: &(impl BooksRead + ?Sized),
    meta: CheckpointMeta,
) -> Result<LoadedCheckpoint> {
    let mut parts = Vec::with_capacity(meta.parts.len());
    for part in &meta.parts {
        let bytes = read_part(state, &meta.run, meta.version, part)?;
        parts.push(Part::whole(part.name.clone(), bytes));
    }
    assert_eq!(parts.len(), meta.parts.len());
    Ok(LoadedCheckpoint { meta, parts })
}

/// The bytes of `part` of checkpoint `version` of `run`: those held inline,
/// its blob, or its chunks in order. A missing or damaged blob, or inline
/// bytes that do not match the digest, is `Inconsistent`, naming the run,
/// the version, the part and the blob or digest.
fn read_part(
    state: &(impl BooksRead + ?Sized),
    run: &RunId,
    version: u64,
    part: &PartRef,
) -> Result<Vec<u8>> {
    let inconsistent = |why: String| Error::Inconsistent {
        what: format!(
            "checkpoint {version} of run {run}: part {} {why}",
            part.name
        ),
    };
    if let Some(held) = &part.inline {
        if digest_of(held) != part.digest || held.len() as u64 != part.size_bytes {
            return Err(inconsistent(format!(
                "(held inline, {}) does not match its digest or size",
                part.digest.short()
            )));
        }
        return Ok(held.clone());
    }
    let capacity = usize::try_from(part.size_bytes).map_or(0, |s| s.min(CHECKPOINT_PART_BYTES_MAX));
    let mut bytes = Vec::with_capacity(capacity);
    let count = part.chunk_count();
    for (index, chunk) in part.blobs().enumerate() {
        // Named only when something is wrong: a load of a long list of
        // chunks formats nothing.
        let which = || {
            if part.chunks.is_empty() {
                format!("(blob {})", chunk.digest.short())
            } else {
                format!(
                    "chunk {} of {count} (blob {})",
                    index + 1,
                    chunk.digest.short()
                )
            }
        };
        let blob = state
            .blob(&chunk.digest)
            .ok_or_else(|| inconsistent(format!("{} is missing", which())))?;
        if digest_of(&blob) != chunk.digest || blob.len() as u64 != chunk.size_bytes {
            return Err(inconsistent(format!(
                "{} does not match its digest or size",
                which()
            )));
        }
        bytes.extend_from_slice(&blob);
    }
    // A chunked part's digest names its chunk list (layout 3) or, in
    // metadata of layout 2, its whole bytes: either covers every chunk, and
    // each chunk was checked against its own digest above.
    let chunked = !part.chunks.is_empty();
    let names_the_value =
        || part.digest == chunk_list_digest(&part.chunks) || part.digest == digest_of(&bytes);
    if chunked && (bytes.len() as u64 != part.size_bytes || !names_the_value()) {
        return Err(inconsistent(format!(
            "(whole {}): its {count} chunks do not make its digest or size",
            part.digest.short()
        )));
    }
    assert_eq!(bytes.len() as u64, part.size_bytes);
    Ok(bytes)
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::fold::apply::apply;
    use crate::books::test_support::*;

    /// How many blobs `decided` writes.
    fn blob_puts(decided: &Decided) -> usize {
        let puts = decided
            .ops
            .iter()
            .filter(|op| matches!(op, Op::BlobPut { .. }));
        puts.count()
    }

    fn big_state() -> Vec<Part> {
        vec![
            Part {
                name: "messages".into(),
                bytes: vec![7u8; 1_000_000],
                extends: None,
                inline: false,
            },
            Part {
                name: "plan".into(),
                bytes: b"step 3 of 5".to_vec(),
                extends: None,
                inline: false,
            },
            Part {
                name: "cursor".into(),
                bytes: 3u64.to_le_bytes().to_vec(),
                extends: None,
                inline: false,
            },
        ]
    }

    #[test]
    fn versions_are_monotonic_and_load_returns_the_newest() {
        let (mut b, g) = books_with_leased_run("r");
        for expected in 1..=3u64 {
            let parts = vec![Part {
                name: "cursor".into(),
                bytes: expected.to_le_bytes().to_vec(),
                extends: None,
                inline: false,
            }];
            let d = b.ok(save("r", &g, 1, parts));
            assert!(
                matches!(d.answer, Answer::CheckpointSaved { version, .. } if version == expected)
            );
        }
        let loaded = load_latest(&b.mem, &rid("r"), 1).unwrap().unwrap();
        assert_eq!(loaded.meta.version, 3);
        assert_eq!(loaded.parts[0].bytes, 3u64.to_le_bytes().to_vec());
    }

    #[test]
    fn schema_mismatch_is_refused_on_load() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 2, big_state()));
        let err = load_latest(&b.mem, &rid("r"), 3).unwrap_err();
        assert!(
            matches!(
                err,
                Error::SchemaMismatch {
                    found: 2,
                    expected: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert!(load_latest(&b.mem, &rid("r"), 2).unwrap().is_some());
        assert!(load_latest(&b.mem, &rid("other"), 2).unwrap().is_none());
    }

    #[test]
    fn second_save_of_an_unchanged_big_state_writes_no_blob() {
        let (mut b, g) = books_with_leased_run("r");
        let first = b.ok(save("r", &g, 1, big_state()));
        assert_eq!(blob_puts(&first), 3);
        let second = b.ok(save("r", &g, 1, big_state()));
        assert_eq!(
            second.ops.len(),
            1,
            "only the metadata op: {:?}",
            second.answer
        );
        assert!(matches!(
            second.answer,
            Answer::CheckpointSaved {
                blobs_written: 0,
                bytes_written: 0,
                blobs_reused: 3,
                ..
            }
        ));
        // Changing one small part writes only that part.
        let mut parts = big_state();
        parts[2].bytes = 4u64.to_le_bytes().to_vec();
        let third = b.ok(save("r", &g, 1, parts));
        assert!(matches!(
            third.answer,
            Answer::CheckpointSaved {
                blobs_written: 1,
                bytes_written: 8,
                ..
            }
        ));
    }

    #[test]
    fn equal_parts_in_one_save_are_stored_once() {
        let (mut b, g) = books_with_leased_run("r");
        let parts = vec![
            Part {
                name: "a".into(),
                bytes: b"same".to_vec(),
                extends: None,
                inline: false,
            },
            Part {
                name: "b".into(),
                bytes: b"same".to_vec(),
                extends: None,
                inline: false,
            },
        ];
        let d = b.ok(save("r", &g, 1, parts));
        assert!(matches!(
            d.answer,
            Answer::CheckpointSaved {
                blobs_written: 1,
                blobs_reused: 1,
                ..
            }
        ));
    }

    #[test]
    fn size_limits_name_the_sizes() {
        let (mut b, g) = books_with_leased_run("r");
        let parts = vec![Part {
            name: "huge".into(),
            bytes: vec![0; CHECKPOINT_PART_BYTES_MAX + 1],
            extends: None,
            inline: false,
        }];
        let err = b.run(save("r", &g, 1, parts)).unwrap_err();
        assert!(matches!(&err, Error::TooLarge { size_bytes, max_bytes, .. }
            if *size_bytes == CHECKPOINT_PART_BYTES_MAX as u64 + 1 && *max_bytes == CHECKPOINT_PART_BYTES_MAX as u64));
        assert!(err.to_string().contains("huge"), "{err}");
        let many: Vec<Part> = (0..=CHECKPOINT_PARTS_MAX)
            .map(|i| Part {
                name: format!("p{i}"),
                bytes: vec![],
                extends: None,
                inline: false,
            })
            .collect();
        assert!(matches!(
            b.run(save("r", &g, 1, many)),
            Err(Error::TooLarge { .. })
        ));
        assert!(b.mem.checkpoint_latest(&rid("r")).is_none());
    }

    #[test]
    fn duplicate_part_names_are_refused() {
        let (mut b, g) = books_with_leased_run("r");
        let parts = vec![
            Part {
                name: "a".into(),
                bytes: vec![1],
                extends: None,
                inline: false,
            },
            Part {
                name: "a".into(),
                bytes: vec![2],
                extends: None,
                inline: false,
            },
        ];
        assert!(matches!(
            b.run(save("r", &g, 1, parts)),
            Err(Error::InvalidCommand { .. })
        ));
    }

    #[test]
    fn a_damaged_blob_is_reported_not_returned() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 1, big_state()));
        let meta = b.mem.checkpoint_latest(&rid("r")).unwrap();
        b.mem
            .corrupt_blob_for_test(&meta.parts[1].digest, b"tampered".to_vec());
        let err = load_latest(&b.mem, &rid("r"), 1).unwrap_err();
        assert!(matches!(err, Error::Inconsistent { .. }), "{err}");
    }

    /// The i-th message of a growing list: 1 KiB, unlike every other.
    fn message(i: u64) -> Vec<u8> {
        let mut bytes = vec![b'm'; 1024];
        bytes[..8].copy_from_slice(&i.to_le_bytes());
        bytes
    }

    fn saved_bytes(d: &Decided) -> u64 {
        let Answer::CheckpointSaved { bytes_written, .. } = d.answer else {
            panic!("{:?}", d.answer)
        };
        bytes_written
    }

    fn messages_at(b: &Books, version: u64) -> PartRef {
        let meta = b.mem.checkpoint_at(&rid("r"), version).unwrap();
        meta.parts
            .into_iter()
            .find(|p| p.name == "messages")
            .unwrap()
    }

    #[test]
    fn two_hundred_appends_of_a_kib_write_each_message_about_once() {
        let (mut b, g) = books_with_leased_run("r");
        let first = b.ok(save("r", &g, 1, vec![Part::whole("messages", message(0))]));
        let mut appended = saved_bytes(&first);
        let mut whole_form = appended;
        let mut expected = message(0);
        for i in 1..200u64 {
            let part = Part::append("messages", PartBase::new(i, "messages"), message(i));
            appended += saved_bytes(&b.ok(save("r", &g, 1, vec![part])));
            expected.extend_from_slice(&message(i));
            whole_form += expected.len() as u64;
        }
        // Each message once, except that the appends at versions 65, 129 and
        // 193 (each CHECKPOINT_PART_CHUNKS_MAX appends after the last whole
        // blob) store the whole list as one blob: 584 KiB, where saving the
        // list whole every time writes 20,100 KiB.
        assert_eq!(CHECKPOINT_PART_CHUNKS_MAX, 64);
        assert_eq!(whole_form, 200 * 201 / 2 * 1024);
        assert_eq!(appended, (200 - 3 + 65 + 129 + 193) * 1024);
        assert!(appended < whole_form / 30, "{appended} of {whole_form}");
        let loaded = load_latest(&b.mem, &rid("r"), 1).unwrap().unwrap();
        assert_eq!(loaded.meta.version, 200);
        assert_eq!(loaded.parts, [Part::whole("messages", expected)]);
    }

    #[test]
    fn an_append_may_extend_any_earlier_version_and_part_and_loads_exactly() {
        let (mut b, g) = books_with_leased_run("r");
        let parts = vec![
            Part::whole("log", b"a".to_vec()),
            Part::whole("plan", b"p".to_vec()),
        ];
        b.ok(save("r", &g, 1, parts));
        b.ok(save("r", &g, 1, vec![Part::whole("log", b"ab".to_vec())]));
        // Version 3 extends version 1's plan under a new name, and version
        // 1's log (not version 2's).
        let parts = vec![
            Part::append("steps", PartBase::new(1, "plan"), b"q".to_vec()),
            Part::append("log", PartBase::new(1, "log"), b"c".to_vec()),
        ];
        let d = b.ok(save("r", &g, 1, parts));
        assert!(matches!(
            d.answer,
            Answer::CheckpointSaved {
                blobs_written: 2,
                bytes_written: 2,
                blobs_reused: 0,
                ..
            }
        ));
        let loaded = load_latest(&b.mem, &rid("r"), 1).unwrap().unwrap();
        assert_eq!(
            loaded.parts,
            [
                Part::whole("steps", b"pq".to_vec()),
                Part::whole("log", b"ac".to_vec())
            ]
        );
        let steps = &loaded.meta.parts[0];
        let chunk = |bytes: &[u8]| (digest_of(bytes), bytes.len() as u64);
        assert_eq!(steps.digest, digest_of_chunks([chunk(b"p"), chunk(b"q")]));
        assert_eq!(steps.chunks.len(), 2);
        // Nothing new: the part is its base, and no blob is written.
        let same = Part::append("log", PartBase::new(3, "log"), Vec::new());
        let d = b.ok(save("r", &g, 1, vec![same]));
        assert_eq!(saved_bytes(&d), 0);
        assert_eq!(
            messages_or(&b, 4, "log").chunks,
            messages_or(&b, 3, "log").chunks
        );
        assert!(b.mem.blob_reference_problems().is_empty());
    }

    fn messages_or(b: &Books, version: u64, name: &str) -> PartRef {
        let meta = b.mem.checkpoint_at(&rid("r"), version).unwrap();
        meta.parts.into_iter().find(|p| p.name == name).unwrap()
    }

    #[test]
    fn an_append_whose_base_is_missing_is_refused_naming_run_version_and_part() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 1, vec![Part::whole("log", b"a".to_vec())]));
        for (version, name, names) in [
            (2, "log", "checkpoint 2 of run r"),
            (1, "plan", "part plan of checkpoint 1 of run r"),
        ] {
            let part = Part::append("log", PartBase::new(version, name), b"b".to_vec());
            let err = b.run(save("r", &g, 1, vec![part])).unwrap_err();
            assert!(matches!(err, Error::NotFound { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains(names) && text.contains("part log"), "{text}");
        }
        assert_eq!(b.mem.checkpoint_latest(&rid("r")).unwrap().version, 1);
    }

    #[test]
    fn past_the_chunk_limit_an_append_stores_the_whole_value_as_one_blob() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 1, vec![Part::whole("messages", message(0))]));
        let mut expected = message(0);
        let mut compacted_at = Vec::new();
        for i in 1..=(2 * CHECKPOINT_PART_CHUNKS_MAX as u64) {
            let part = Part::append("messages", PartBase::new(i, "messages"), message(i));
            let d = b.ok(save("r", &g, 1, vec![part]));
            expected.extend_from_slice(&message(i));
            let stored = messages_at(&b, i + 1);
            assert!(stored.chunk_count() <= CHECKPOINT_PART_CHUNKS_MAX);
            if stored.chunks.is_empty() {
                assert_eq!(saved_bytes(&d), expected.len() as u64);
                compacted_at.push(i + 1);
            }
        }
        // Version 1 is one blob; appends 1 to 63 make 2 to 64 chunks; the
        // 64th stores the whole again, and so on.
        let max = CHECKPOINT_PART_CHUNKS_MAX as u64;
        assert_eq!(compacted_at, [max + 1, 2 * max + 1]);
        let loaded = load_latest(&b.mem, &rid("r"), 1).unwrap().unwrap();
        assert_eq!(loaded.parts[0].bytes, expected);
        assert!(b.mem.blob_reference_problems().is_empty());
    }

    #[test]
    fn a_damaged_chunk_is_reported_naming_run_version_and_part() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 1, vec![Part::whole("messages", message(0))]));
        let part = Part::append("messages", PartBase::new(1, "messages"), message(1));
        b.ok(save("r", &g, 1, vec![part]));
        let chunk = messages_at(&b, 2).chunks[1];
        b.mem.corrupt_blob_for_test(&chunk.digest, message(7));
        let err = load_latest(&b.mem, &rid("r"), 1).unwrap_err();
        assert!(matches!(err, Error::Inconsistent { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("checkpoint 2 of run r") && text.contains("part messages chunk 2 of 2"),
            "{text}"
        );
        // An append does not read its base, so it saves; its load meets the
        // same damaged chunk and says so.
        let part = Part::append("messages", PartBase::new(2, "messages"), message(2));
        b.ok(save("r", &g, 1, vec![part]));
        let err = load_latest(&b.mem, &rid("r"), 1).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("checkpoint 3 of run r") && text.contains("part messages chunk 2 of 3"),
            "{text}"
        );
    }

    #[test]
    fn a_chunked_part_whose_digest_names_neither_its_list_nor_its_bytes_is_refused() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 1, vec![Part::whole("messages", message(0))]));
        let part = Part::append("messages", PartBase::new(1, "messages"), message(1));
        b.ok(save("r", &g, 1, vec![part]));
        let mut meta = b.mem.checkpoint_at(&rid("r"), 2).unwrap();
        let whole = [message(0), message(1)].concat();
        assert_eq!(
            meta.parts[0].digest,
            chunk_list_digest(&meta.parts[0].chunks)
        );
        // Layout 2 named the whole bytes: still read.
        meta.parts[0].digest = digest_of(&whole);
        assert_eq!(
            load_parts(&b.mem, meta.clone()).unwrap().parts[0].bytes,
            whole
        );
        // Anything else is refused, naming the whole digest.
        meta.parts[0].digest = digest_of(&message(1));
        let err = load_parts(&b.mem, meta).unwrap_err();
        assert!(
            err.to_string().contains("chunks do not make its digest"),
            "{err}"
        );
    }

    #[test]
    fn the_part_limits_apply_to_the_whole_value_of_an_append() {
        let (mut b, g) = books_with_leased_run("r");
        let half = CHECKPOINT_PART_BYTES_MAX / 2 + 1;
        b.ok(save("r", &g, 1, vec![Part::whole("big", vec![1; half])]));
        let part = Part::append("big", PartBase::new(1, "big"), vec![2; half]);
        let err = b.run(save("r", &g, 1, vec![part])).unwrap_err();
        assert!(
            matches!(err, Error::TooLarge { size_bytes, .. } if size_bytes == 2 * half as u64),
            "{err}"
        );
        assert!(err.to_string().contains("big"), "{err}");
    }

    #[test]
    fn a_chunked_checkpoint_copied_to_another_run_loads_and_counts_its_chunks() {
        // Fork and retry copy a checkpoint's parts by reference, as here.
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 1, vec![Part::whole("messages", message(0))]));
        let part = Part::append("messages", PartBase::new(1, "messages"), message(1));
        b.ok(save("r", &g, 1, vec![part]));
        b.ok(create("f", b"input"));
        let meta = b.mem.checkpoint_latest(&rid("r")).unwrap();
        let mut copy = meta.clone();
        copy.run = rid("f");
        copy.version = 1;
        apply(&mut b.mem, &Op::CheckpointSaved { meta: copy }).unwrap();
        let loaded = load_latest(&b.mem, &rid("f"), 1).unwrap().unwrap();
        assert_eq!(loaded.parts[0].bytes, [message(0), message(1)].concat());
        let refs = b.mem.blob_refs(&rid("f")).unwrap();
        assert_eq!(meta.parts[0].chunks.len(), 2);
        for chunk in &meta.parts[0].chunks {
            assert!(refs.digests.contains(&chunk.digest));
            assert_eq!(b.mem.blob_holders(&chunk.digest), Some(2));
        }
        assert!(b.mem.blob_reference_problems().is_empty());
    }

    #[test]
    fn the_reference_check_names_a_chunk_that_is_gone() {
        use crate::books::vocabulary::state::BooksWrite;
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 1, vec![Part::whole("messages", message(0))]));
        let part = Part::append("messages", PartBase::new(1, "messages"), message(1));
        b.ok(save("r", &g, 1, vec![part]));
        let chunk = messages_at(&b, 2).chunks[1];
        // Gone with its count and reference, so only the checkpoint names it.
        let mut refs = b.mem.blob_refs(&rid("r")).unwrap();
        refs.digests.retain(|d| *d != chunk.digest);
        b.mem.put_blob_refs(refs);
        b.mem.put_blob_holders(chunk.digest, None);
        b.mem.delete_blob(&chunk.digest);
        let problems = b.mem.blob_reference_problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("checkpoint 2 of run r stores part messages in blob"),
            "{problems:?}"
        );
    }

    #[test]
    fn an_append_on_an_empty_base_is_stored_whole() {
        let (mut b, g) = books_with_leased_run("r");
        b.ok(save("r", &g, 1, vec![Part::whole("notes", Vec::new())]));
        let part = Part::append("notes", PartBase::new(1, "notes"), b"first".to_vec());
        let d = b.ok(save("r", &g, 1, vec![part]));
        assert_eq!(saved_bytes(&d), 5);
        let stored = messages_or(&b, 2, "notes");
        assert!(stored.chunks.is_empty(), "{stored:?}");
        assert_eq!(stored.digest, digest_of(b"first"));
    }

    #[test]
    fn small_parts_that_ask_are_held_inline_and_written_with_each_checkpoint() {
        let (mut b, g) = books_with_leased_run("r");
        let held = |mut parts: Vec<Part>| {
            parts[1] = parts[1].clone().held_inline();
            parts[2] = parts[2].clone().held_inline();
            parts
        };
        let first = b.ok(save("r", &g, 1, held(big_state())));
        // The megabyte is a blob; the plan and the cursor are held inline.
        assert_eq!(blob_puts(&first), 1);
        assert!(matches!(
            first.answer,
            Answer::CheckpointSaved {
                blobs_written: 1,
                bytes_written: 1_000_000,
                blobs_reused: 0,
                parts_inline: 2,
                ..
            }
        ));
        // Saved again unchanged: the blob is reused, the small parts are
        // written again in the only op, the metadata's.
        let second = b.ok(save("r", &g, 1, held(big_state())));
        assert_eq!(second.ops.len(), 1);
        let Answer::CheckpointSaved {
            blobs_reused,
            parts_inline,
            bytes_written,
            ..
        } = second.answer
        else {
            panic!("{:?}", second.answer)
        };
        assert_eq!((blobs_reused, parts_inline, bytes_written), (1, 2, 0));
        let loaded = load_latest(&b.mem, &rid("r"), 1).unwrap().unwrap();
        assert_eq!(loaded.parts, big_state(), "loaded whole, not asking");
        let cursor = &loaded.meta.parts[2];
        assert_eq!(cursor.inline.as_deref(), Some(&3u64.to_le_bytes()[..]));
        assert_eq!(cursor.blobs().count(), 0);
        // Asking does not hold a part past the limit.
        let over = Part::whole("big", vec![1; CHECKPOINT_INLINE_BYTES_MAX + 1]).held_inline();
        let d = b.ok(save("r", &g, 1, vec![over]));
        assert!(matches!(
            d.answer,
            Answer::CheckpointSaved {
                blobs_written: 1,
                parts_inline: 0,
                ..
            }
        ));
        assert!(b.mem.blob_reference_problems().is_empty());
    }

    #[test]
    fn bytes_held_inline_that_do_not_match_their_digest_are_reported_not_returned() {
        let (mut b, g) = books_with_leased_run("r");
        let mut parts = big_state();
        parts[1] = parts[1].clone().held_inline();
        b.ok(save("r", &g, 1, parts));
        let mut meta = b.mem.checkpoint_latest(&rid("r")).unwrap();
        assert!(load_parts(&b.mem, meta.clone()).is_ok());
        meta.parts[1].inline = Some(b"step 4 of 5".to_vec());
        let err = load_parts(&b.mem, meta).unwrap_err();
        assert!(matches!(err, Error::Inconsistent { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("checkpoint 1 of run r: part plan (held inline"),
            "{text}"
        );
    }

    #[test]
    fn an_append_on_a_base_held_inline_stays_inline_while_it_fits_then_is_one_blob() {
        let (mut b, g) = books_with_leased_run("r");
        let d = b.ok(save(
            "r",
            &g,
            1,
            vec![Part::whole("notes", b"a;".to_vec()).held_inline()],
        ));
        assert_eq!(d.ops.len(), 1, "no blob: {:?}", d.ops);
        let mut expected = b"a;".to_vec();
        let note = vec![b'n'; 300];
        let mut inline_until = 0;
        for version in 1..=5u64 {
            let part = Part::append("notes", PartBase::new(version, "notes"), note.clone());
            let d = b.ok(save("r", &g, 1, vec![part.held_inline()]));
            expected.extend_from_slice(&note);
            let stored = messages_or(&b, version + 1, "notes");
            assert_eq!(stored.size_bytes, expected.len() as u64);
            assert!(stored.chunks.is_empty(), "{stored:?}");
            if expected.len() <= CHECKPOINT_INLINE_BYTES_MAX {
                // Base and new bytes, written again in the metadata.
                assert_eq!(stored.inline.as_deref(), Some(&expected[..]));
                assert!(matches!(
                    d.answer,
                    Answer::CheckpointSaved {
                        parts_inline: 1,
                        ..
                    }
                ));
                inline_until = version + 1;
            } else if stored.inline.is_some() {
                panic!(
                    "version {} holds {} bytes inline",
                    version + 1,
                    expected.len()
                );
            } else {
                // Past the limit, the whole value once as a blob; the next
                // append chunks on it.
                assert_eq!(saved_bytes(&d), expected.len() as u64);
                break;
            }
        }
        assert_eq!(
            inline_until, 4,
            "2 + 3 x 300 bytes fit in 1,024; 2 + 4 x 300 do not"
        );
        let part = Part::append("notes", PartBase::new(5, "notes"), note.clone());
        let d = b.ok(save("r", &g, 1, vec![part]));
        expected.extend_from_slice(&note);
        assert_eq!(saved_bytes(&d), 300);
        assert_eq!(messages_or(&b, 6, "notes").chunks.len(), 2);
        // Nothing new on an inline base: the base's bytes, stored as a blob
        // if not asked, held again if asked.
        let same = Part::append("again", PartBase::new(2, "notes"), Vec::new());
        let d = b.ok(save("r", &g, 1, vec![same.clone()]));
        assert!(matches!(
            d.answer,
            Answer::CheckpointSaved {
                blobs_written: 1,
                parts_inline: 0,
                ..
            }
        ));
        let d = b.ok(save("r", &g, 1, vec![same.held_inline()]));
        assert!(matches!(
            d.answer,
            Answer::CheckpointSaved {
                parts_inline: 1,
                ..
            }
        ));
        let loaded = load_latest(&b.mem, &rid("r"), 1).unwrap().unwrap();
        assert_eq!(
            loaded.parts,
            [Part::whole("again", [&b"a;"[..], &note].concat())]
        );
        let sixth = load_parts(&b.mem, b.mem.checkpoint_at(&rid("r"), 6).unwrap()).unwrap();
        assert_eq!(sixth.parts, [Part::whole("notes", expected)]);
        assert!(b.mem.blob_reference_problems().is_empty());
    }
}
