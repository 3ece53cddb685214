//! A database directory: the exclusive lock names the directory, creation
//! cut at any I/O call restarts cleanly, and a clean close turns damage to
//! the final batch into an error instead of a silent truncation.

use std::path::Path;
use std::sync::Arc;

use actum::db::{Db, DbOptions};
use actum::planted::PlantedBug;
use actum::wal::WalOptions;
use actum::wal::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES, segment_path};
use actum::{DatabaseId, Error, FsStorage, Lsn, ManualClock, OpenMode, SegmentId, Storage};
use actum_sim::{FaultConfig, Rng, SimDisk};

fn options() -> DbOptions {
    DbOptions {
        wal: WalOptions {
            segment_size_bytes: 16 * 1024,
            max_record_bytes: 1024,
            ..WalOptions::default()
        },
        database_id: Some(DatabaseId(0xac7)),
    }
}

#[test]
fn a_second_open_is_refused_with_an_error_naming_the_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    let clock = ManualClock::new(1);
    let (first, report) = Db::open(Arc::clone(&storage), &clock, dir.path(), options())
        .expect("first open creates the database");
    assert!(report.created);
    let second = Db::open(Arc::clone(&storage), &clock, dir.path(), options());
    match second {
        Err(error @ Error::Locked { .. }) => {
            let message = error.to_string();
            assert!(
                message.contains(&dir.path().display().to_string()),
                "the error names the directory: {message}"
            );
        }
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(first);
    let (_, report) =
        Db::open(storage, &clock, dir.path(), options()).expect("open after the first closed");
    assert!(!report.created, "the database was found, not made again");
}

/// Creation cut by a power loss at every I/O call in turn: the next open
/// always ends with a usable, empty database, never a half-made one.
#[test]
fn creation_cut_at_every_io_call_restarts_cleanly() {
    let clock = ManualClock::new(1);
    let dir = Path::new("/db");
    let mut cut_at = 0;
    loop {
        let disk = SimDisk::new(Rng::new(cut_at), FaultConfig::crash_only());
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        disk.set_crash_after_ops(cut_at);
        let outcome = Db::open(Arc::clone(&storage), &clock, dir, options());
        let finished = outcome.is_ok();
        drop(outcome);
        disk.crash(&mut Rng::new(cut_at ^ 0xfeed));
        let (db, _) = Db::open(Arc::clone(&storage), &clock, dir, options())
            .unwrap_or_else(|e| panic!("open after a cut at I/O call {cut_at}: {e}"));
        assert!(
            db.wal().durable_lsn() <= Lsn(1),
            "nothing was appended, cut at {cut_at}"
        );
        let lsn = db.wal().append(&[b"first"]).expect("append");
        drop(db);
        let (db, _) = Db::open(storage, &clock, dir, options()).expect("reopen");
        assert_eq!(db.wal().durable_lsn(), lsn, "cut at {cut_at}");
        if finished {
            break;
        }
        cut_at += 1;
        assert!(cut_at < 500, "creation never finished");
    }
    assert!(cut_at > 10, "creation takes more than a few I/O calls");
}

/// Flips one byte in the payload of the last record of segment 1.
fn damage_last_record(storage: &dyn Storage, dir: &Path, payload_len: usize) {
    let path = segment_path(&dir.join("wal"), SegmentId(1));
    let file = storage.open(&path, OpenMode::Existing).expect("segment");
    let mut bytes = vec![0u8; 16 * 1024];
    file.read_at(0, &mut bytes).expect("read segment");
    let end = bytes.iter().rposition(|&b| b != 0).expect("records") + 1;
    let start = SEGMENT_HEADER_BYTES as usize;
    assert!(end > start + RECORD_HEADER_BYTES + payload_len);
    let offset = (end - payload_len / 2) as u64;
    let mut byte = [0u8; 1];
    file.read_at(offset, &mut byte).expect("read byte");
    file.write_at(offset, &[byte[0] ^ 0x40])
        .expect("write byte");
    file.sync_data().expect("sync");
}

/// Appends three one-record batches; closes cleanly or just drops.
fn three_batches_then(dir: &Path, clean: bool) -> Lsn {
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    let clock = ManualClock::new(1);
    let (db, _) = Db::open(storage, &clock, dir, options()).expect("create");
    let mut last = Lsn::ZERO;
    for payload in [[1u8; 64], [2u8; 64], [3u8; 64]] {
        last = db.wal().append(&[&payload]).expect("append");
    }
    if clean {
        db.close().expect("close");
    }
    last
}

#[test]
fn after_a_clean_close_damage_to_the_last_batch_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let last = three_batches_then(dir.path(), true);
    assert_eq!(last, Lsn(3));
    damage_last_record(&FsStorage::new(), dir.path(), 64);
    let reopened = Db::open(
        Arc::new(FsStorage::new()),
        &ManualClock::new(2),
        dir.path(),
        options(),
    );
    match reopened {
        Err(Error::Corrupt { reason, .. }) => {
            assert!(reason.contains("closed cleanly"), "{reason}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
}

/// The documented limit (docs/DURABILITY.md, "Known limits"): without a
/// clean close, damage to the final batch looks like a torn write and is
/// truncated, and only that batch is lost.
#[test]
fn without_a_clean_close_damage_to_the_last_batch_is_truncated_as_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    three_batches_then(dir.path(), false);
    damage_last_record(&FsStorage::new(), dir.path(), 64);
    let (db, report) = Db::open(
        Arc::new(FsStorage::new()),
        &ManualClock::new(2),
        dir.path(),
        options(),
    )
    .expect("open truncates a torn tail");
    assert_eq!(db.wal().durable_lsn(), Lsn(2));
    let recovery = report.recovery.expect("recovered");
    assert!(recovery.truncated_bytes > 0, "{recovery:?}");
}

/// A new database's first manifest copy damaged before any reopen: the
/// placeholder copy (sequence 0) is current, and the open steps its log
/// epoch past the creation's instead of reusing it, storing (before its
/// first record) a sequence the next open steps past in turn. Found by the `recover_image` fuzz target.
#[test]
fn losing_the_first_manifest_copy_before_any_reopen_still_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let last = three_batches_then(dir.path(), false);
    let copy = dir.path().join("MANIFEST-0");
    let mut bytes = std::fs::read(&copy).expect("read copy 0");
    bytes[24] ^= 0x10;
    std::fs::write(&copy, &bytes).expect("damage copy 0");

    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    let clock = ManualClock::new(1);
    let (db, report) = Db::open(Arc::clone(&storage), &clock, dir.path(), options())
        .expect("the placeholder copy opens the database");
    let manifest = report.manifest.expect("an existing database");
    assert!(manifest.chosen.ends_with("MANIFEST-1"), "{manifest:?}");
    assert_eq!(manifest.rejected.len(), 1, "copy 0 was rejected");
    assert_eq!(db.wal().durable_lsn(), last, "no record was lost");
    assert_eq!(db.manifest().sequence, 0, "the open wrote no manifest");
    let appended = db.wal().append(&[b"after"]).expect("append");
    let sequence = db.manifest().sequence;
    assert_eq!(
        sequence, 2,
        "two updates before the first record: past the creation's epoch"
    );
    drop(db);
    let (db, _) = Db::open(storage, &clock, dir.path(), options()).expect("reopen");
    assert_eq!(db.wal().durable_lsn(), appended);
    db.wal().append(&[b"again"]).expect("append");
    assert!(
        db.manifest().sequence > sequence,
        "every open that writes a new epoch"
    );
}

/// A cleanly closed database copied file by file with nothing synced (what
/// `cp` leaves): its open syncs nothing (a clean close), so its first
/// append must make every file the copy holds durable before its record
/// lands. A power loss after that append then keeps the copy whole and the
/// acknowledged record in it (docs/DURABILITY.md, "Opening a cleanly closed
/// database").
#[test]
fn a_copy_of_a_closed_database_keeps_what_its_first_session_acknowledged() {
    if let Err(lost) = copy_then_power_cut(None) {
        panic!("{lost}");
    }
}

/// The harness bites: with the first write skipping the syncs the open
/// left to it, the copy's acknowledged record (or the whole copy) is lost.
#[test]
fn a_first_write_that_skips_the_syncs_the_open_left_is_caught() {
    let caught = copy_then_power_cut(Some(PlantedBug::FirstWriteSkipsOpenSyncs));
    assert!(caught.is_err(), "the planted bug went unnoticed");
}

/// Closes a database of five runs on a simulated disk, copies its files to
/// `/copy` without syncing anything, opens the copy, creates one more run
/// (acknowledged), cuts the power (every unsynced write and directory entry
/// lost) and reopens the copy: `Err` names what did not survive.
fn copy_then_power_cut(planted: Option<PlantedBug>) -> Result<(), String> {
    use actum::books::{CreateRun, RunId, digest_of};
    use actum::{Clock, Engine, EngineOptions};

    let create = |name: &str| CreateRun {
        run: RunId::new(name).expect("run id"),
        input_digest: digest_of(name.as_bytes()),
        agent_version: "1".into(),
        trace_id: String::new(),
        parent: None,
        input: None,
    };
    let disk = SimDisk::new(Rng::new(7), FaultConfig::none());
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1));
    let mut options = EngineOptions {
        db: options(),
        ..EngineOptions::default()
    };
    options.db.wal.planted_bug = planted;
    let open_at = |dir: &str| {
        Engine::open_with(
            Arc::clone(&storage),
            Arc::clone(&clock),
            Path::new(dir),
            options.clone(),
        )
    };
    let engine = open_at("/db").expect("create");
    for k in 0..5 {
        engine
            .create_run(create(&format!("run-{k}")))
            .expect("create run");
    }
    engine.close().expect("close");

    for (path, bytes) in disk.snapshot() {
        let Some(rest) = path.strip_prefix("/db/") else {
            continue;
        };
        if rest == "LOCK" {
            continue;
        }
        let to = Path::new("/copy").join(rest);
        let parent = to.parent().expect("a file in a directory");
        storage.create_dir_all(parent).expect("make directory");
        let file = storage.open(&to, OpenMode::CreateNew).expect("create copy");
        file.write_at(0, &bytes).expect("copy bytes");
    }

    let engine = open_at("/copy").expect("open the copy");
    assert_eq!(engine.recovery().replayed_records, 0, "a clean close");
    engine.create_run(create("after")).expect("acknowledged");
    drop(engine);
    disk.crash(&mut Rng::new(8));

    let engine =
        open_at("/copy").map_err(|e| format!("the copy does not open after the power cut: {e}"))?;
    for name in ["run-0", "run-4", "after"] {
        let run = RunId::new(name).expect("run id");
        if engine.run(&run).expect("read").is_none() {
            return Err(format!("{name} did not survive the power cut in the copy"));
        }
    }
    engine.close().expect("close");
    Ok(())
}
