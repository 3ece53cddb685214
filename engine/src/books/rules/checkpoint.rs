//! Checkpoints of agent state: metadata per (run, version) naming caller-
//! named parts by content digest, with the part bytes stored once in a blob
//! table, so saving an unchanged large state writes only its metadata.
//!
//! Invariants: a run's checkpoint versions are 1, 2, 3, ... with no gaps;
//! every digest a checkpoint names is in the blob table before the
//! checkpoint is (the blob ops precede the checkpoint op in one decision);
//! a load checks the schema version and re-checks every blob's digest.

use std::collections::BTreeSet;

use crate::books::base::digest::digest_of;
use crate::books::base::ids::{RunId, validate_name};
use crate::books::base::limits::{
    CHECKPOINT_PART_BYTES_MAX, CHECKPOINT_PARTS_MAX, CHECKPOINT_TOTAL_BYTES_MAX, check_size,
};
use crate::books::records::checkpoint::{
    CheckpointMeta, LoadedCheckpoint, Part, PartRef, check_schema,
};
use crate::books::rules::checks::{check_live, existing};
use crate::books::vocabulary::answer::{Answer, Decided};
use crate::books::vocabulary::command::SaveCheckpoint;
use crate::books::vocabulary::op::Op;
use crate::books::vocabulary::state::BooksRead;
use crate::error::{Error, Result};

fn check_parts(cmd: &SaveCheckpoint) -> Result<()> {
    let run = &cmd.run;
    check_size(
        || format!("part count of a checkpoint of run {run}"),
        cmd.parts.len(),
        CHECKPOINT_PARTS_MAX,
    )?;
    let mut names = BTreeSet::new();
    let mut total_bytes = 0usize;
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
        total_bytes += part.bytes.len();
    }
    check_size(
        || format!("checkpoint of run {run}"),
        total_bytes,
        CHECKPOINT_TOTAL_BYTES_MAX,
    )
}

/// Decides `SaveCheckpoint`: one blob op per part whose digest the books
/// lack (each digest once), then the metadata op.
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
    let mut ops = Vec::new();
    let mut written = BTreeSet::new();
    let mut refs = Vec::with_capacity(cmd.parts.len());
    let (mut bytes_written, mut blobs_reused) = (0u64, 0usize);
    for part in &cmd.parts {
        let digest = digest_of(&part.bytes);
        if written.contains(&digest) || state.blob_exists(&digest) {
            blobs_reused += 1;
        } else {
            written.insert(digest);
            bytes_written += part.bytes.len() as u64;
            ops.push(Op::BlobPut {
                digest,
                bytes: part.bytes.clone(),
            });
        }
        refs.push(PartRef {
            name: part.name.clone(),
            digest,
            size_bytes: part.bytes.len() as u64,
        });
    }
    assert_eq!(ops.len() + blobs_reused, cmd.parts.len());
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
        blobs_written: ops.len(),
        bytes_written,
        blobs_reused,
    };
    ops.push(Op::CheckpointSaved { meta });
    Ok(Decided { ops, answer })
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

/// Reads the parts `meta` names from the blob table, checking each part's
/// digest and size (the schema is the caller's business: see
/// [`check_schema`]).
pub fn load_parts(
    state: &(impl BooksRead + ?Sized),
    meta: CheckpointMeta,
) -> Result<LoadedCheckpoint> {
    let run = &meta.run;
    let mut parts = Vec::with_capacity(meta.parts.len());
    for part in &meta.parts {
        let inconsistent = |why: &str| Error::Inconsistent {
            what: format!(
                "checkpoint {} of run {run}: part {} (blob {}) {why}",
                meta.version,
                part.name,
                part.digest.short()
            ),
        };
        let bytes = state
            .blob(&part.digest)
            .ok_or_else(|| inconsistent("is missing"))?;
        if digest_of(&bytes) != part.digest || bytes.len() as u64 != part.size_bytes {
            return Err(inconsistent("does not match its digest or size"));
        }
        parts.push(Part {
            name: part.name.clone(),
            bytes,
        });
    }
    assert_eq!(parts.len(), meta.parts.len());
    Ok(LoadedCheckpoint { meta, parts })
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected None or Err"
)]
mod tests {
    use super::*;
    use crate::books::test_support::*;

    fn big_state() -> Vec<Part> {
        vec![
            Part {
                name: "messages".into(),
                bytes: vec![7u8; 1_000_000],
            },
            Part {
                name: "plan".into(),
                bytes: b"step 3 of 5".to_vec(),
            },
            Part {
                name: "cursor".into(),
                bytes: 3u64.to_le_bytes().to_vec(),
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
        assert_eq!(
            first
                .ops
                .iter()
                .filter(|op| matches!(op, Op::BlobPut { .. }))
                .count(),
            3
        );
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
            },
            Part {
                name: "b".into(),
                bytes: b"same".to_vec(),
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
        }];
        let err = b.run(save("r", &g, 1, parts)).unwrap_err();
        assert!(matches!(&err, Error::TooLarge { size_bytes, max_bytes, .. }
            if *size_bytes == CHECKPOINT_PART_BYTES_MAX as u64 + 1 && *max_bytes == CHECKPOINT_PART_BYTES_MAX as u64));
        assert!(err.to_string().contains("huge"), "{err}");
        let many: Vec<Part> = (0..=CHECKPOINT_PARTS_MAX)
            .map(|i| Part {
                name: format!("p{i}"),
                bytes: vec![],
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
            },
            Part {
                name: "a".into(),
                bytes: vec![2],
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
}
