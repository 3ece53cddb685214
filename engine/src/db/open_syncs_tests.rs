//! How many syncs an open of a cleanly closed database makes, counted on a
//! recording disk: a regression in open time shows up here first. Each
//! expected sync is named with what it protects (docs/DURABILITY.md).

use std::sync::Arc;

use crate::books::{CreateRun, RunId, digest_of};
use crate::clock::ManualClock;
use crate::engine::{Engine, EngineOptions};
use crate::manifest::testkit::RecordingStorage;
use crate::storage::Storage;

fn syncs(log: &[String]) -> Vec<String> {
    log.iter()
        .filter(|op| op.starts_with("sync_data") || op.starts_with("sync_dir"))
        .cloned()
        .collect()
}

fn a_closed_database_with_runs(storage: &Arc<RecordingStorage>, dir: &std::path::Path) {
    let disk: Arc<dyn Storage> = storage.clone();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let engine = Engine::open_with(disk, clock, dir, EngineOptions::default()).expect("create");
    for k in 0..20 {
        let name = format!("run-{k}");
        engine
            .create_run(CreateRun {
                run: RunId::new(name.as_str()).expect("run id"),
                input_digest: digest_of(name.as_bytes()),
                agent_version: "1".into(),
                trace_id: String::new(),
                parent: None,
                input: None,
            })
            .expect("create run");
    }
    engine.close().expect("close");
}

/// A database of 20 runs closed cleanly, reopened on a recording disk
/// whose record is empty from the reopen on.
fn reopened_after_a_clean_close(dir: &std::path::Path) -> (Arc<RecordingStorage>, Engine) {
    let storage = Arc::new(RecordingStorage::default());
    a_closed_database_with_runs(&storage, dir);
    storage.take_log();
    let disk: Arc<dyn Storage> = storage.clone();
    let clock = Arc::new(ManualClock::new(1_700_000_100_000));
    let engine =
        Engine::open_with(disk, clock, dir, EngineOptions::default()).expect("reopen");
    assert_eq!(engine.recovery().replayed_records, 0, "a clean close");
    (storage, engine)
}

#[test]
fn opening_a_cleanly_closed_database_makes_only_the_syncs_that_protect_something() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (storage, engine) = reopened_after_a_clean_close(dir.path());
    let opened = syncs(&storage.take_log());
    let expected = [
        // The page sums of the clean close, spoiled once loaded: a crash
        // from here on leaves none to trust (DURABILITY.md, "State store
        // checks"). With them, the page check (`verify_state_on_open`, on
        // by default) checks pages as redb reads them, so redb's whole
        // check, which rewrote and synced its header three times, is not
        // made; and the store is not synced before redb reads it, the sums
        // proving the close synced every write of it.
        "sync_data state.redb.sums",
        // redb marks the file as in use: its own crash-recovery flag.
        "sync_data state.redb",
    ];
    // The manifest copies, the segments and the WAL directory were made
    // durable by the clean close: their syncs wait for the first append,
    // and the open's epoch too (DURABILITY.md, "Opening a cleanly closed
    // database").
    assert_eq!(opened, expected, "the syncs of an open of a clean database");
    // An open that only reads: its close finds the clean shutdown still
    // recorded and writes no manifest; redb closes its file (its allocator
    // state and clean header, each write synced) and the sums are written
    // after redb's last sync.
    for k in 0..20 {
        let name = format!("run-{k}");
        let run = RunId::new(name.as_str()).expect("run id");
        assert!(engine.run(&run).expect("read").is_some(), "{name} is read");
    }
    engine.close().expect("close");
    let closed = syncs(&storage.take_log());
    assert!(
        closed
            .iter()
            .all(|op| op == "sync_data state.redb" || op == "sync_data state.redb.sums"),
        "{closed:?}"
    );
    let sums = closed.iter().filter(|op| op.ends_with(".sums")).count();
    let last_redb = closed.iter().rposition(|op| op == "sync_data state.redb");
    let at = closed.iter().position(|op| op.ends_with(".sums"));
    assert!(sums == 1 && at > last_redb, "{closed:?}");
}

#[test]
fn the_first_append_after_a_clean_open_makes_what_the_open_read_durable_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (storage, engine) = reopened_after_a_clean_close(dir.path());
    storage.take_log();
    engine
        .create_run(CreateRun {
            run: RunId::new("run-after").expect("run id"),
            input_digest: digest_of(b"after"),
            agent_version: "1".into(),
            trace_id: String::new(),
            parent: None,
            input: None,
        })
        .expect("create run");
    let log = storage.take_log();
    let first_record = log
        .iter()
        .position(|op| op.starts_with("write ") && op.ends_with(".wal"))
        .expect("the append wrote a record");
    let before: Vec<String> = syncs(&log[..first_record]);
    let expected = [
        // The prepared segment, the active one and the WAL directory,
        // which recovery read without syncing (a database copied with
        // `cp` may sit in the page cache only)...
        "sync_data 00000000000000000002.wal",
        "sync_data 00000000000000000001.wal",
        "sync_dir",
        // ...the database directory's own entry (in its parent), the
        // manifest copies' entries and the copy read at open (the other
        // one the update below overwrites and syncs)...
        "sync_dir",
        "sync_dir",
        "sync_data MANIFEST-0",
        // ...and the open's epoch, with the clean shutdown cleared: durable
        // before the first record of the epoch.
        "sync_data MANIFEST-1",
    ];
    assert_eq!(before, expected, "the syncs before the first record");
    // The next append has nothing left to do first.
    engine
        .create_run(CreateRun {
            run: RunId::new("run-after-2").expect("run id"),
            input_digest: digest_of(b"after 2"),
            agent_version: "1".into(),
            trace_id: String::new(),
            parent: None,
            input: None,
        })
        .expect("create run");
    let second = syncs(&storage.take_log());
    assert!(
        second.iter().all(|op| op.ends_with(".wal")),
        "{second:?}"
    );
    engine.close().expect("close");
}
