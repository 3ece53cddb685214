//! A checkpoint part saved in append form on the public API: each save
//! writes only its new bytes, every version loads exactly what was saved,
//! before and after a crash (recovery replays the log) and from the state
//! store, a fork of a chunked checkpoint loads whole, `actum verify` finds
//! the chunk references sound, and pruning the run frees exactly the
//! chunks no kept run references.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::path::Path;
use std::sync::Arc;

use actum::books::{Guard, Part, PartBase, RunState, SaveCheckpoint, Transition, digest_of};
use actum::engine::{Engine, EngineOptions};
use actum::{FsStorage, ManualClock, Storage};
use support::*;

/// The i-th message: 1 KiB, unlike every other.
fn message(i: u64) -> Vec<u8> {
    let mut bytes = vec![b'm'; 1024];
    bytes[..8].copy_from_slice(&i.to_le_bytes());
    bytes
}

/// The messages 0 to `last`, as version `last + 1` holds them.
fn messages_to(last: u64) -> Vec<u8> {
    (0..=last).flat_map(message).collect()
}

fn open(dir: &Path, clock: &Arc<ManualClock>) -> Engine {
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    Engine::open_with(storage, clock.clone(), dir, EngineOptions::default()).unwrap()
}

fn save(engine: &Engine, guard: &Guard, part: Part) -> u64 {
    let saved = engine
        .save_checkpoint(SaveCheckpoint {
            run: rid("chat"),
            guard: guard.clone(),
            schema_version: 1,
            parts: vec![part],
        })
        .unwrap();
    saved.bytes_written
}

/// Every version of `run` from 1 to `versions` loads the messages it saved.
fn assert_every_version_loads(engine: &Engine, versions: u64, when: &str) {
    for version in 1..=versions {
        let loaded = engine.load_version(&rid("chat"), version, 1).unwrap();
        assert_eq!(
            loaded.parts,
            [Part::whole("messages", messages_to(version - 1))],
            "version {version} {when}"
        );
    }
}

fn stored(engine: &Engine, i: u64) -> bool {
    let digest = digest_of(&message(i));
    engine.read(|b| Ok(b.blob(&digest).is_some())).unwrap()
}

#[test]
fn appended_parts_write_only_new_bytes_survive_a_crash_fork_and_prune() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open(dir.path(), &clock);
    let grant = create_and_lease(&engine, "chat", "w1");
    let mut written = save(&engine, &grant.guard, Part::whole("messages", message(0)));
    for i in 1..10 {
        let base = PartBase::new(i, "messages");
        written += save(
            &engine,
            &grant.guard,
            Part::append("messages", base, message(i)),
        );
    }
    assert_eq!(written, 10 * 1024, "each message written once");
    assert_every_version_loads(&engine, 10, "as saved");

    // A crash: recovery replays the log; then from the state store.
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_every_version_loads(&engine, 10, "after a replay");
    engine.checkpoint().unwrap();
    drop(engine);
    let engine = open(dir.path(), &clock);
    assert_every_version_loads(&engine, 10, "from the state store");

    // A fork from version 6 holds messages 0 to 5, by reference.
    let forked = engine
        .fork_run(&rid("chat"), &rid("chat-fork"), Some(6), "ops", "try again")
        .unwrap();
    assert_eq!(forked.checkpoint, Some(6));
    let fork = engine.load_latest(&rid("chat-fork"), 1).unwrap().unwrap();
    assert_eq!(fork.parts, [Part::whole("messages", messages_to(5))]);
    engine.close().unwrap();
    let report = actum::verify::verify_dir(Arc::new(FsStorage::new()), dir.path()).unwrap();
    assert!(!report.damaged(), "{:?}", report.findings);

    // Pruning the run frees the chunks only it referenced (messages 6 to
    // 9); the fork keeps messages 0 to 5.
    let engine = open(dir.path(), &clock);
    let grant = take_back(&engine, &grant);
    engine
        .transition(Transition {
            run: rid("chat"),
            guard: grant.guard.clone(),
            to: RunState::Completed,
            expected_version: None,
            reason: "done".into(),
        })
        .unwrap();
    assert_eq!(
        engine.prune_runs(vec![rid("chat")], 0).unwrap().pruned,
        [rid("chat")]
    );
    engine.checkpoint().unwrap();
    assert!((0..6).all(|i| stored(&engine, i)));
    assert!((6..10).all(|i| !stored(&engine, i)));
    let fork = engine.load_latest(&rid("chat-fork"), 1).unwrap().unwrap();
    assert_eq!(fork.parts, [Part::whole("messages", messages_to(5))]);
    engine.close().unwrap();
    let report = actum::verify::verify_dir(Arc::new(FsStorage::new()), dir.path()).unwrap();
    assert!(!report.damaged(), "{:?}", report.findings);
}
