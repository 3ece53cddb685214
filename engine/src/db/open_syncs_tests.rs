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

#[test]
fn opening_a_cleanly_closed_database_makes_only_the_syncs_that_protect_something() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Arc::new(RecordingStorage::default());
    a_closed_database_with_runs(&storage, dir.path());
    storage.take_log();
    let disk: Arc<dyn Storage> = storage.clone();
    let clock = Arc::new(ManualClock::new(1_700_000_100_000));
    let engine = Engine::open_with(disk, clock, dir.path(), EngineOptions::default())
        .expect("reopen");
    assert_eq!(engine.recovery().replayed_records, 0, "a clean close");
    let opened = syncs(&storage.take_log());
    let expected = [
        // The manifest copies and their directory entries are made durable
        // before either is trusted: a copy from a failed update can sit
        // unsynced in the page cache (DURABILITY.md, "Manifest update").
        "sync_dir",
        "sync_data MANIFEST-0",
        "sync_data MANIFEST-1",
        // Every live segment, then the WAL directory, before recovery builds
        // on them (DURABILITY.md, "Recovery", step 2): the active segment
        // and the one prepared at the last checkpoint.
        "sync_data 00000000000000000001.wal",
        "sync_data 00000000000000000002.wal",
        "sync_dir",
        // The open's epoch, durable before the first append of this epoch.
        "sync_data MANIFEST-1",
        // The state store before redb (and replay) trusts it.
        "sync_data state.redb",
        // The page sums of the clean close, emptied once loaded: a crash
        // from here on leaves none to trust (DURABILITY.md, "State store
        // checks"). With them, the page check (`verify_state_on_open`, on
        // by default) checks pages as redb reads them, so redb's whole
        // check, which rewrote and synced its header three times, is not
        // made.
        "sync_data state.redb.sums",
        // redb marks the file as in use: its own crash-recovery flag.
        "sync_data state.redb",
    ];
    assert_eq!(opened, expected, "the syncs of an open of a clean database");
    // A close with nothing new: no checkpoint (nothing to make durable),
    // one manifest update recording the clean shutdown, and redb closing
    // its file (its allocator state and clean header, each write synced).
    engine.close().expect("close");
    let closed = syncs(&storage.take_log());
    let manifest_syncs = closed.iter().filter(|op| op.contains("MANIFEST")).count();
    assert_eq!(manifest_syncs, 1, "{closed:?}");
    assert!(
        closed.iter().all(|op| op.contains("MANIFEST")
            || op == "sync_data state.redb"
            || op == "sync_data state.redb.sums"),
        "{closed:?}"
    );
    // The page sums are written once, after redb's last sync.
    let sums = closed.iter().filter(|op| op.ends_with(".sums")).count();
    let last_redb = closed.iter().rposition(|op| op == "sync_data state.redb");
    let at = closed.iter().position(|op| op.ends_with(".sums"));
    assert!(sums == 1 && at > last_redb, "{closed:?}");
}
