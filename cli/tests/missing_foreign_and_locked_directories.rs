//! Every command on a directory that holds no database (missing, empty,
//! full of unrelated files, a foreign manifest) fails with a message
//! naming the directory and creates nothing; on a directory an engine has
//! open the read commands answer from a snapshot, naming its LSN, and the
//! writes say the directory is in use.

#![expect(clippy::unwrap_used, reason = "a test fails loudly")]

use crate::support;

use std::path::Path;

use actum::engine::{Engine, EngineOptions};
use support::*;

/// One of each command, reads and writes, with `{}` for the directory.
const COMMANDS: [&[&str]; 10] = [
    &["inspect", "{}"],
    &["runs", "{}"],
    &["show", "{}", "r"],
    &["verify", "{}"],
    &["export", "{}", "--all"],
    &["stuck", "{}", "--older-than", "1h"],
    &[
        "pause",
        "{}",
        "--run",
        "r",
        "--operator",
        "ops",
        "--reason",
        "x",
    ],
    &[
        "resume",
        "{}",
        "--run",
        "r",
        "--operator",
        "ops",
        "--reason",
        "x",
    ],
    &[
        "cancel",
        "{}",
        "--run",
        "r",
        "--operator",
        "ops",
        "--reason",
        "x",
    ],
    &[
        "reconcile",
        "{}",
        "--key",
        "r/s/1",
        "--outcome",
        "failed",
        "--error",
        "no",
        "--operator",
        "ops",
        "--reason",
        "x",
    ],
];

/// Runs every command on `dir`: each exits 2, says `expect`, and leaves
/// `dir` as it was.
fn refused_everywhere(dir: &Path, expect: &str) {
    let before = dir.exists().then(|| hash_tree(dir));
    for args in COMMANDS {
        let out = actum_on(dir, args);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains(&dir.display().to_string()),
            "{args:?}: {said}"
        );
        assert!(said.contains(expect), "{args:?}: {said}");
        assert!(!said.contains("panicked"), "{args:?}: {said}");
        assert_eq!(dir.exists().then(|| hash_tree(dir)), before, "{args:?}");
    }
}

#[test]
fn a_missing_directory_is_refused_and_not_created() {
    let parent = tempfile::tempdir().unwrap();
    let missing = parent.path().join("no-such-db");
    refused_everywhere(&missing, "the directory does not exist");
    assert!(!missing.exists());
}

#[test]
fn an_empty_directory_is_refused_and_stays_empty() {
    let dir = tempfile::tempdir().unwrap();
    refused_everywhere(dir.path(), "the directory is empty");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no LOCK made"
    );
}

#[test]
fn a_directory_of_unrelated_files_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
    std::fs::create_dir(dir.path().join("photos")).unwrap();
    refused_everywhere(
        dir.path(),
        "holds 2 entries (notes.txt, photos) but no manifest",
    );
}

#[test]
fn a_file_given_for_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("db");
    std::fs::write(&file, b"x").unwrap();
    refused_everywhere(&file, "a file, not a directory");
}

#[test]
fn a_foreign_manifest_is_named_never_read_as_ours() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("MANIFEST-0"), b"SQLite format 3\0 and more").unwrap();
    let before = hash_tree(dir.path());
    for args in [
        &["inspect", "{}"][..],
        &["stuck", "{}", "--older-than", "1h"],
    ] {
        let out = actum_on(dir.path(), args);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let said = stderr(&out);
        assert!(said.contains("MANIFEST-0"), "{said}");
        assert!(said.contains("wrong magic"), "{said}");
    }
    let verified = actum_on(dir.path(), &["verify", "{}"]);
    assert_eq!(code(&verified), 1, "{}", stderr(&verified));
    assert!(stdout(&verified).contains("MANIFEST-0 at byte 0"));
    assert_eq!(hash_tree(dir.path()), before);
}

#[test]
fn a_directory_an_engine_has_open_is_read_as_a_snapshot_and_refused_for_writes() {
    let db = known_db();
    let engine = open_retrying(|| Engine::open(db.path(), EngineOptions::default()));
    let lsn = engine.durable_lsn().0;
    let as_of = format!("as of LSN {lsn} (live database");
    for args in [
        &["inspect", "{}"][..],
        &["verify", "{}"],
        &["stuck", "{}", "--older-than", "1h"],
    ] {
        let out = actum_on(db.path(), args);
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        assert!(stdout(&out).contains(&as_of), "{args:?}: {}", stdout(&out));
    }
    let exported = actum_on(db.path(), &["export", "{}", "--run", runs::DONE]);
    assert_eq!(code(&exported), 0, "{}", stderr(&exported));
    assert!(stderr(&exported).contains(&as_of), "{}", stderr(&exported));
    assert!(stdout(&exported).lines().count() > 1);
    let out = actum_on(
        db.path(),
        &[
            "pause",
            "{}",
            "--run",
            runs::PENDING,
            "--operator",
            "ops",
            "--reason",
            "x",
        ],
    );
    assert_eq!(code(&out), 2);
    let said = stderr(&out);
    assert!(said.contains("is in use by another process"), "{said}");
    assert!(said.contains(&db.path().display().to_string()), "{said}");
    engine.close().unwrap();
    let out = actum_on(db.path(), &["inspect", "{}"]);
    assert_eq!(code(&out), 0);
    assert!(!stdout(&out).contains("live database"), "{}", stdout(&out));
}
