//! `actum verify` on copies of a known database damaged in one place each:
//! a byte of an acknowledged WAL record, one manifest copy, both copies,
//! the state store cut short, a byte of a state store row. Each exits 1 and
//! names the damaged file, and the byte offset where the engine knows it;
//! the other parts still verify. A command that must open the database
//! refuses the damaged copy with the file named, and exits 2.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::path::{Path, PathBuf};

use actum::wal::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, decode_record_header};
use serde_json::Value;
use support::*;

/// The byte offsets of the first `count` records of segment 1.
fn record_offsets(db: &Path, count: usize) -> Vec<u64> {
    let manifest = std::fs::read(db.join("MANIFEST-0")).unwrap();
    let id = actum::manifest::decode(&manifest).unwrap().database_id;
    let seed = actum::wal::format::record_seed(id, actum::SegmentId(1));
    let bytes = std::fs::read(segment(db, 1)).unwrap();
    let mut offsets = vec![SEGMENT_HEADER_BYTES];
    while offsets.len() < count {
        let at = *offsets.last().unwrap();
        let header = decode_record_header(&bytes[usize::try_from(at).unwrap()..], seed).unwrap();
        offsets.push(header.next_offset(at));
    }
    offsets
}

/// `verify --json` on `db`: exit code 1, and the damaged findings as
/// (file, offset).
fn damaged(db: &Path) -> Vec<(PathBuf, Option<u64>)> {
    let out = actum_on(db, &["verify", "{}", "--json"]);
    assert_eq!(code(&out), 1, "{}{}", stdout(&out), stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["damaged"], true);
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "damaged")
        .map(|f| {
            (
                PathBuf::from(f["file"].as_str().unwrap()),
                f["offset"].as_u64(),
            )
        })
        .collect()
}

/// The areas `verify --json` found intact.
fn intact_areas(db: &Path) -> Vec<String> {
    let out = actum_on(db, &["verify", "{}", "--json"]);
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["status"] == "intact")
        .map(|f| f["area"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_flipped_byte_in_an_acknowledged_wal_record_is_named_by_segment_and_offset() {
    let db = known_db();
    let copy = copy_db(db.path());
    let second = record_offsets(copy.path(), 2)[1];
    flip(
        &segment(copy.path(), 1),
        second + RECORD_HEADER_BYTES as u64 + 1,
    );
    assert_eq!(
        damaged(copy.path()),
        [(segment(copy.path(), 1), Some(second))]
    );
    let text = stdout(&actum_on(copy.path(), &["verify", "{}"]));
    let named = format!("{} at byte {second}", segment(copy.path(), 1).display());
    assert!(text.contains(&named), "{text}");
    assert!(text.contains("DAMAGED"), "{text}");
    // The state store is checked all the same.
    assert!(intact_areas(copy.path()).contains(&"state_store".to_string()));
    // An open refuses it, naming the file and pointing at verify.
    let refused = actum_on(copy.path(), &["inspect", "{}"]);
    assert_eq!(code(&refused), 2);
    let said = stderr(&refused);
    assert!(
        said.contains(&segment(copy.path(), 1).display().to_string()),
        "{said}"
    );
    assert!(said.contains("actum verify"), "{said}");
}

#[test]
fn damage_to_the_log_first_record_is_named_even_where_the_checkpoint_covers_it() {
    let db = known_db();
    let copy = copy_db(db.path());
    flip(
        &segment(copy.path(), 1),
        SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES as u64,
    );
    assert_eq!(
        damaged(copy.path()),
        [(segment(copy.path(), 1), Some(SEGMENT_HEADER_BYTES))]
    );
    // Its header instead of its payload: the intact records behind it give
    // it away.
    let copy = copy_db(db.path());
    flip(&segment(copy.path(), 1), SEGMENT_HEADER_BYTES + 9);
    assert_eq!(
        damaged(copy.path()),
        [(segment(copy.path(), 1), Some(SEGMENT_HEADER_BYTES))]
    );
}

#[test]
fn damage_to_a_record_not_yet_checkpointed_is_named_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    drop(build_known(dir.path()));
    let third = record_offsets(dir.path(), 3)[2];
    flip(&segment(dir.path(), 1), third + RECORD_HEADER_BYTES as u64);
    assert_eq!(damaged(dir.path()), [(segment(dir.path(), 1), Some(third))]);
}

#[test]
fn one_damaged_manifest_copy_is_named_and_the_other_is_the_root() {
    let db = known_db();
    let copy = copy_db(db.path());
    // A byte of the database id: the copy's CRC (at byte 80) fails.
    flip(&copy.path().join("MANIFEST-0"), 30);
    assert_eq!(
        damaged(copy.path()),
        [(copy.path().join("MANIFEST-0"), Some(80))]
    );
    let text = stdout(&actum_on(copy.path(), &["verify", "{}"]));
    assert!(text.contains("the current root is"), "{text}");
    assert!(text.contains("MANIFEST-1"), "{text}");
    let intact = intact_areas(copy.path());
    assert!(intact.contains(&"wal".to_string()), "{intact:?}");
    assert!(intact.contains(&"state_store".to_string()), "{intact:?}");
}

#[test]
fn both_damaged_manifest_copies_are_named() {
    let db = known_db();
    let copy = copy_db(db.path());
    flip(&copy.path().join("MANIFEST-0"), 0);
    std::fs::write(copy.path().join("MANIFEST-1"), b"not a manifest").unwrap();
    assert_eq!(
        damaged(copy.path()),
        [
            (copy.path().join("MANIFEST-0"), Some(0)),
            (copy.path().join("MANIFEST-1"), Some(0)),
        ]
    );
    let refused = actum_on(copy.path(), &["stuck", "{}", "--older-than", "1h"]);
    assert_eq!(code(&refused), 2);
    assert!(
        stderr(&refused).contains("no valid manifest copy"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn a_state_store_cut_short_is_named() {
    let db = known_db();
    let copy = copy_db(db.path());
    let state = copy.path().join("state.redb");
    let len = std::fs::metadata(&state).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&state)
        .unwrap();
    file.set_len(len / 3).unwrap();
    assert_eq!(damaged(copy.path()), [(state, None)]);
    assert!(intact_areas(copy.path()).contains(&"wal".to_string()));
}

#[test]
fn a_flipped_byte_in_a_state_store_row_is_named() {
    let db = known_db();
    let copy = copy_db(db.path());
    let state = copy.path().join("state.redb");
    let mut bytes = std::fs::read(&state).unwrap();
    let marker = TRACE_MARKER.as_bytes();
    let at: Vec<usize> = bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, w)| *w == marker)
        .map(|(i, _)| i)
        .collect();
    assert!(!at.is_empty(), "the run's row holds its trace id");
    // Every copy redb keeps of the row's page, so the live one is hit.
    for &i in &at {
        bytes[i + 3] ^= 0x01;
    }
    std::fs::write(&state, bytes).unwrap();
    // The clean close left page sums: the 4 KiB block is named.
    let blocks: Vec<u64> = at.iter().map(|&i| (i as u64 + 3) / 4096 * 4096).collect();
    let found = damaged(copy.path());
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, state);
    let offset = found[0].1.expect("the block's offset");
    assert!(blocks.contains(&offset), "{offset} not in {blocks:?}");
    // Without them (a crash, or a store copied without its sums), redb's
    // own check finds the page but says no offset.
    std::fs::remove_file(copy.path().join("state.redb.sums")).unwrap();
    assert_eq!(damaged(copy.path()), [(state, None)]);
}

#[test]
fn repair_cuts_the_log_at_the_damage_keeps_a_copy_and_says_what_was_lost() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("books");
    drop(build_known(&dir));
    // Intact: repair changes nothing.
    let before = hash_tree(&dir);
    let out = actum_on(&dir, &["repair", "{}"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("nothing was changed"),
        "{}",
        stdout(&out)
    );
    assert_eq!(hash_tree(&dir), before);
    assert!(!parent.path().join("books.cut-1").exists());

    let third = record_offsets(&dir, 3)[2];
    flip(&segment(&dir, 1), third + RECORD_HEADER_BYTES as u64);
    let damaged_log = std::fs::read(segment(&dir, 1)).unwrap();
    let out = actum_on(&dir, &["repair", "{}", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let said: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(said["damaged"], true);
    let dropped = said["dropped"].as_str().unwrap();
    let named = format!("{} from byte offset {third}", segment(&dir, 1).display());
    assert!(dropped.starts_with(&named), "{dropped}");
    // The log as it was, kept beside the database, byte for byte.
    let copy = parent.path().join("books.cut-1");
    assert_eq!(said["copy"], copy.display().to_string());
    assert_eq!(
        std::fs::read(copy.join("wal").join(segment(&dir, 1).file_name().unwrap())).unwrap(),
        damaged_log
    );
    // The database opens and verifies again; the log ends before the cut.
    let verified = actum_on(&dir, &["verify", "{}"]);
    assert_eq!(code(&verified), 0, "{}", stdout(&verified));
    let engine = open_retrying(|| {
        actum::engine::Engine::open_read_only(&dir, actum::engine::EngineOptions::default())
    });
    // The repair's log ended just before the first record lost; the open
    // may have logged one more since (the leases of the process that died).
    let end = said["log_ends_at"].as_u64().unwrap();
    assert!(
        dropped.contains(&format!(": lsn {} ..=", end + 1)),
        "{dropped}"
    );
    assert!((end..=end + 1).contains(&engine.durable_lsn().0));
    drop(engine);
    // A second repair finds nothing to do.
    let out = actum_on(&dir, &["repair", "{}"]);
    assert!(stdout(&out).contains("no damage"), "{}", stdout(&out));
}
