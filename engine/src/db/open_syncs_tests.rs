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

/// Creates the run `name`, its input its name.
fn create(engine: &Engine, name: &str) {
    engine
        .create_run(CreateRun {
            run: RunId::new(name).expect("run id"),
            input_digest: digest_of(name.as_bytes()),
            agent_version: "1".into(),
            trace_id: String::new(),
            parent: None,
            input: None,
        })
        .expect("create run");
}

fn a_closed_database_with_runs(storage: &Arc<RecordingStorage>, dir: &std::path::Path) {
    let disk: Arc<dyn Storage> = storage.clone();
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let engine = Engine::open_with(disk, clock, dir, EngineOptions::default()).expect("create");
    for k in 0..20 {
        create(&engine, &format!("run-{k}"));
    }
    engine.close().expect("close");
}

/// A database of 20 runs closed cleanly, reopened on a recording disk
/// whose record is empty from the reopen on.
fn reopened_after_a_clean_close(dir: &std::path::Path) -> (Arc<RecordingStorage>, Engine) {
    let storage = Arc::new(RecordingStorage::default());
    a_closed_database_with_runs(&storage, dir);
    storage.take_log();
    storage.take_reads();
    let disk: Arc<dyn Storage> = storage.clone();
    let clock = Arc::new(ManualClock::new(1_700_000_100_000));
    let engine =
        Engine::open_with(disk, clock, dir, EngineOptions::default()).expect("reopen");
    assert_eq!(engine.recovery().replayed_records, 0, "a clean close");
    (storage, engine)
}

/// The writes and size changes in `log`.
fn changes(log: &[String]) -> Vec<String> {
    log.iter()
        .filter(|op| op.starts_with("write") || op.starts_with("set_len"))
        .cloned()
        .collect()
}

#[test]
fn opening_and_closing_a_cleanly_closed_database_that_only_reads_writes_and_syncs_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (storage, engine) = reopened_after_a_clean_close(dir.path());
    let opened = storage.take_log();
    // The manifest copies, the segments and the WAL directory were made
    // durable by the clean close: their syncs wait for the first append,
    // and the open's epoch too (DURABILITY.md, "Opening a cleanly closed
    // database"). The state store opens on redb's read-only handle, which
    // does not mark the file in use, and its page sums stay whole until
    // the store's first write (DURABILITY.md, "A store opened for
    // reading"); the page check (`verify_state_on_open`, on by default)
    // checks pages against them as redb reads them.
    assert_eq!(syncs(&opened), Vec::<String>::new(), "the syncs of the open");
    assert_eq!(changes(&opened), Vec::<String>::new(), "the writes of the open");
    assert!(engine.local().pipeline.state().reading_only(), "no commit yet");
    for k in 0..20 {
        let name = format!("run-{k}");
        let run = RunId::new(name.as_str()).expect("run id");
        assert!(engine.run(&run).expect("read").is_some(), "{name} is read");
    }
    // Its close finds the clean shutdown still recorded and writes no
    // manifest; redb's read-only handle writes nothing, and the sums file
    // the open found whole still is.
    engine.close().expect("close");
    let closed = storage.take_log();
    assert_eq!(syncs(&closed), Vec::<String>::new(), "the syncs of the close");
    assert_eq!(changes(&closed), Vec::<String>::new(), "the writes of the close");
}

#[test]
fn an_open_after_a_clean_close_reads_the_log_once_and_only_as_far_as_it_goes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (storage, engine) = reopened_after_a_clean_close(dir.path());
    let reads = storage.take_reads();
    let log_bytes: u64 = reads
        .iter()
        .filter(|(name, _)| name.ends_with(".wal"))
        .map(|(_, bytes)| bytes)
        .sum();
    let wal = dir.path().join("wal");
    let segments = std::fs::read_dir(&wal).expect("wal dir").count() as u64;
    let held: u64 = std::fs::read_dir(&wal)
        .expect("wal dir")
        .map(|e| e.expect("entry").metadata().expect("metadata").len())
        .sum();
    // Recovery reads a segment in reads that start small and double, and
    // the replay reader reads nothing when nothing is after the
    // checkpoint. Before both, this open read 389,120 bytes of the two
    // segments' 262,144: each whole (its first read was up to a megabyte),
    // the active one twice.
    assert!(
        log_bytes <= held / 4,
        "the open read {log_bytes} bytes of {segments} segments holding {held}: {reads:?}"
    );
    engine.close().expect("close");
}

#[test]
fn the_state_stores_first_write_after_a_clean_open_spoils_the_sums_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (storage, engine) = reopened_after_a_clean_close(dir.path());
    create(&engine, "run-after");
    engine.checkpoint().expect("checkpoint");
    assert!(!engine.local().pipeline.state().reading_only(), "the checkpoint committed");
    engine.close().expect("close");
    let log = storage.take_log();
    let first_store_write = log
        .iter()
        .position(|op| op == "write state.redb" || op == "set_len state.redb")
        .expect("the checkpoint wrote the store");
    let before = &log[..first_store_write];
    // The sums file, spoiled (its magic zeroed) and synced before redb's
    // first write of the store (its header marking the file in use).
    let spoiled = before
        .iter()
        .position(|op| op == "write state.redb.sums")
        .expect("the sums were spoiled before the store changed");
    assert!(
        before[spoiled..].contains(&"sync_data state.redb.sums".to_string()),
        "durably: {before:?}"
    );
    // And written whole again at the close, after redb's last sync.
    let last_redb_sync = log
        .iter()
        .rposition(|op| op == "sync_data state.redb")
        .expect("redb synced");
    let rewritten = log
        .iter()
        .rposition(|op| op == "sync_data state.redb.sums")
        .expect("the close wrote the sums");
    assert!(rewritten > last_redb_sync, "{log:?}");
}

#[test]
fn the_first_append_after_a_clean_open_makes_what_the_open_read_durable_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (storage, engine) = reopened_after_a_clean_close(dir.path());
    storage.take_log();
    create(&engine, "run-after");
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
        // ...the open's epoch, with the clean shutdown cleared: durable
        // before the first record of the epoch...
        "sync_data MANIFEST-1",
        // ...and the state store, which the open read on redb's read-only
        // handle without syncing it (DURABILITY.md, "A store opened for
        // reading").
        "sync_data state.redb",
    ];
    assert_eq!(before, expected, "the syncs before the first record");
    // The next append has nothing left to do first.
    create(&engine, "run-after-2");
    let second = syncs(&storage.take_log());
    assert!(
        second.iter().all(|op| op.ends_with(".wal")),
        "{second:?}"
    );
    engine.close().expect("close");
}

/// The claim rows (`books_live_claims`) of the 20 live runs in the state
/// store at `dir`, as `(key, claim)`.
fn claim_rows(dir: &std::path::Path) -> Vec<(String, crate::state::LiveClaim)> {
    use crate::state::rows::{LIVE_CLAIMS_TABLE, RowTable, decode_row};
    use redb::{ReadableDatabase, ReadableTable};
    let db = redb::Database::create(dir.join("state.redb")).expect("redb");
    let txn = db.begin_read().expect("read");
    let table = txn.open_table(LIVE_CLAIMS_TABLE).expect("claims table");
    table
        .iter()
        .expect("iter")
        .map(|item| {
            let (key, value) = item.expect("row");
            let claim = decode_row(RowTable::LiveClaim, value.value()).expect("a claim row");
            (key.value().to_string(), claim)
        })
        .collect()
}

#[test]
fn an_open_files_parked_runs_by_their_claim_rows_and_refuses_one_that_disagrees() {
    use crate::state::LiveClaim;
    use crate::state::rows::{LIVE_CLAIMS_TABLE, RowTable, encode_row};
    let clock = Arc::new(ManualClock::new(1_700_000_100_000));
    let worker = crate::books::WorkerId::new("w").expect("worker");
    let checked = EngineOptions {
        check_live_claims: true,
        ..EngineOptions::default()
    };
    let unchecked = EngineOptions {
        check_live_claims: false,
        ..EngineOptions::default()
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Arc::new(RecordingStorage::default());
    a_closed_database_with_runs(&storage, dir.path());
    let disk: Arc<dyn Storage> = storage.clone();
    // One claim row per live run, written with its row: pending, unleased,
    // claimable since it was created.
    let rows = claim_rows(dir.path());
    assert_eq!(rows.len(), 20, "{rows:?}");
    for (key, claim) in &rows {
        assert_eq!(claim.run, *key);
        assert_eq!(claim.agent_version, "1");
        assert!(!claim.leased && !claim.parks);
        assert_eq!(claim.from_ms, Some(1_700_000_000_000));
    }
    // A claim row that says another thing than its run's row (here: another
    // agent version) is what an open that does not check files the run by,
    // the run rows unread (a claim of it then meets the engine's assertion
    // that memory and the claim index agree); an open that checks refuses,
    // naming the run.
    let db = redb::Database::create(dir.path().join("state.redb")).expect("redb");
    let txn = db.begin_write().expect("write");
    {
        let mut table = txn.open_table(LIVE_CLAIMS_TABLE).expect("claims table");
        let (key, claim) = rows[3].clone();
        let stale = LiveClaim {
            agent_version: "2".into(),
            ..claim
        };
        let row = encode_row(RowTable::LiveClaim, &stale);
        table.insert(key.as_str(), row.as_slice()).expect("insert");
    }
    txn.commit().expect("commit");
    drop(db);
    let err = Engine::open_with(disk.clone(), clock.clone(), dir.path(), checked.clone())
        .expect_err("a stale claim");
    let text = err.to_string();
    assert!(text.contains("live claim row of run run-") && text.contains("\"2\""), "{text}");
    // `actum verify` holds every claim row to its run's row.
    let report = crate::verify::verify_dir(disk.clone(), dir.path()).expect("verify");
    assert!(report.damaged(), "{report:?}");
    let found = report.damage().map(|f| f.what.clone()).collect::<Vec<_>>();
    let expected = format!("the live claim row of run {} says", rows[3].0);
    assert!(found.iter().any(|what| what.contains(&expected)), "{found:?}");
    let engine = Engine::open_with(disk, clock.clone(), dir.path(), unchecked)
        .expect("an open that does not check");
    let claim = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        engine.claim_next_of(&worker, 60_000, &["2".to_string()])
    }));
    let panic = claim.expect_err("filed under version 2, its row says 1");
    let message = panic
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains(&format!("run {} is indexed under its agent version", rows[3].0)),
        "{message}"
    );
    drop(engine);
    // With claim rows that agree, every run is filed, as an open that read
    // the run rows would: a worker claims them all.
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Arc::new(RecordingStorage::default());
    a_closed_database_with_runs(&storage, dir.path());
    let disk: Arc<dyn Storage> = storage.clone();
    let engine = Engine::open_with(disk, clock, dir.path(), checked).expect("reopen");
    let mut claimed = 0;
    while engine.claim_next(&worker, 60_000).expect("claim").is_some() {
        claimed += 1;
    }
    assert_eq!(claimed, 20);
}

#[test]
fn a_store_from_before_the_claim_rows_opens_by_its_run_rows() {
    use crate::state::rows::LIVE_CLAIMS_TABLE;
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Arc::new(RecordingStorage::default());
    a_closed_database_with_runs(&storage, dir.path());
    // As a store written before schema 15 is: no claims table.
    let db = redb::Database::create(dir.path().join("state.redb")).expect("redb");
    let txn = db.begin_write().expect("write");
    assert!(txn.delete_table(LIVE_CLAIMS_TABLE).expect("delete"));
    txn.commit().expect("commit");
    drop(db);
    let disk: Arc<dyn Storage> = storage.clone();
    let clock = Arc::new(ManualClock::new(1_700_000_100_000));
    let engine = Engine::open_with(disk, clock, dir.path(), EngineOptions::default())
        .expect("reopen");
    let worker = crate::books::WorkerId::new("w").expect("worker");
    let mut claimed = 0;
    while engine.claim_next(&worker, 60_000).expect("claim").is_some() {
        claimed += 1;
    }
    assert_eq!(claimed, 20, "every run filed from its run row");
    // The claims wrote the runs' rows again, and their claim rows with them.
    engine.close().expect("close");
    let rows = claim_rows(dir.path());
    assert_eq!(rows.len(), 20, "{rows:?}");
    assert!(rows.iter().all(|(_, claim)| claim.leased), "{rows:?}");
}
