//! Replays every committed fuzz corpus file through its target's entry
//! function on the stable toolchain, so `cargo test` checks what the fuzzer
//! found (and the seed inputs) without nightly or cargo-fuzz.
//!
//! The corpus lives in `fuzz/corpus/<target>/`, one directory per target in
//! `actum_sim::fuzz::TARGETS`; each must hold at least one file, so the test
//! cannot pass vacuously. The seed inputs built by
//! `actum_sim::fuzz::corpus::seed_inputs` must all be committed there: set
//! `ACTUM_WRITE_FUZZ_CORPUS=1` to write the missing ones.

use std::fs;
use std::path::{Path, PathBuf};

use actum_sim::fuzz::{self, TARGETS, corpus};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

/// The files of one target's corpus, sorted by name.
fn corpus_files(target: &str) -> Vec<PathBuf> {
    let dir = corpus_dir(target);
    let entries =
        fs::read_dir(&dir).unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

fn replay(target: &str) {
    let files = corpus_files(target);
    assert!(
        !files.is_empty(),
        "fuzz/corpus/{target}/ is empty: the replay would pass vacuously"
    );
    for path in &files {
        let data = fs::read(path).expect("a readable corpus file");
        // A panic inside names the target's invariant; this line names the file.
        eprintln!("replaying {} ({} bytes)", path.display(), data.len());
        assert!(fuzz::run_target(target, &data), "unknown target {target}");
    }
}

#[test]
fn wal_record_corpus_replays() {
    replay("wal_record");
}

#[test]
fn manifest_copy_corpus_replays() {
    replay("manifest_copy");
}

#[test]
fn ops_corpus_replays() {
    replay("ops");
}

#[test]
fn recover_image_corpus_replays() {
    replay("recover_image");
}

#[test]
fn campaign_corpus_replays() {
    replay("campaign");
}

#[test]
fn agents_corpus_replays() {
    replay("agents");
}

#[test]
fn state_store_corpus_replays() {
    replay("state_store");
}

#[test]
fn every_target_has_a_replay_test_and_a_fuzz_target() {
    let source = include_str!("fuzz_corpus_replay.rs");
    for target in TARGETS {
        assert!(
            source.contains(&format!("fn {target}_corpus_replays()")),
            "no replay test for {target}"
        );
        let wrapper = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/fuzz_targets")
            .join(format!("{target}.rs"));
        assert!(wrapper.is_file(), "no fuzz target {}", wrapper.display());
    }
}

#[test]
fn seed_inputs_are_committed_to_the_corpus() {
    let write = std::env::var_os("ACTUM_WRITE_FUZZ_CORPUS").is_some();
    let mut missing = Vec::new();
    for input in corpus::seed_inputs() {
        assert!(TARGETS.contains(&input.target), "{input:?}");
        let path = corpus_dir(input.target).join(&input.file_name);
        if fs::read(&path).ok().as_deref() == Some(input.bytes.as_slice()) {
            continue;
        }
        if write {
            fs::create_dir_all(corpus_dir(input.target)).expect("create the corpus directory");
            fs::write(&path, &input.bytes).expect("write a seed input");
        } else {
            missing.push(path.display().to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "seed inputs missing or stale (rerun with ACTUM_WRITE_FUZZ_CORPUS=1): {missing:#?}"
    );
}
