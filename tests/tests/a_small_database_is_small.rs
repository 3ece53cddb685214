//! A small database is small: WAL segments start at their first step and
//! grow ahead of need in zero-filled, synced steps (docs/DURABILITY.md,
//! "Growing a segment"), so an empty database takes under a mebibyte, and a
//! crash at any I/O call of a grow loses no acknowledged record. A clean
//! close shrinks a grown log back to its first step ("Shrinking the log at
//! close") and compacts the state store ("Compaction at close"), and a
//! crash at any I/O call of that close loses nothing.

use crate::support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actum::books::{CreateRun, RunId, digest_of};
use actum::db::{Db, DbOptions};
use actum::wal::format::{SEGMENT_HEADER_BYTES, segment_path};
use actum::wal::{SEGMENT_FIRST_STEP_BYTES_DEFAULT, WalOptions};
use actum::{Clock, DatabaseId, Engine, EngineOptions, Lsn, ManualClock, SegmentId, Storage};
use actum_sim::{FaultConfig, Rng, SimDisk};
use support::OnRead;

/// The most an empty database may take on disk.
const EMPTY_DATABASE_BYTES_MAX: u64 = 1 << 20;

/// Every file under `dir` with its length, sorted by path.
fn files(dir: &Path) -> Vec<(String, u64)> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    // Bounded by the directory tree, a handful of entries.
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).expect("read_dir") {
            let entry = entry.expect("entry");
            let meta = entry.metadata().expect("metadata");
            if meta.is_dir() {
                todo.push(entry.path());
            } else {
                let name = entry
                    .path()
                    .strip_prefix(dir)
                    .expect("under dir")
                    .display()
                    .to_string();
                found.push((name, meta.len()));
            }
        }
    }
    found.sort();
    found
}

fn total(files: &[(String, u64)]) -> u64 {
    files.iter().map(|(_, len)| len).sum()
}

#[test]
fn an_empty_database_takes_at_most_one_mebibyte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("create");
    let open = files(dir.path());
    engine.close().expect("close");
    let closed = files(dir.path());
    println!("empty database, open: {} bytes {open:?}", total(&open));
    println!(
        "empty database, closed: {} bytes {closed:?}",
        total(&closed)
    );
    for (when, listing) in [("open", &open), ("closed", &closed)] {
        assert!(
            total(listing) <= EMPTY_DATABASE_BYTES_MAX,
            "an empty database ({when}) takes {} bytes: {listing:?}",
            total(listing)
        );
        let segments: Vec<_> = listing
            .iter()
            .filter(|(n, _)| n.ends_with(".wal"))
            .collect();
        assert!(!segments.is_empty(), "{listing:?}");
        for (name, len) in segments {
            assert_eq!(*len, SEGMENT_FIRST_STEP_BYTES_DEFAULT, "{name}");
        }
    }
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("reopen");
    engine.close().expect("close again");
    assert!(total(&files(dir.path())) <= EMPTY_DATABASE_BYTES_MAX);
}

/// Commands that log more than half of the first step make the engine
/// grow the segment after their commits, never inside one.
#[test]
fn an_engine_grows_its_segment_after_commits_not_inside_them() {
    const RUNS: u32 = 700;
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("create");
    // About 230 bytes of log each: 700 pass 128 KiB, the first step, and
    // half of the second.
    for i in 0..RUNS {
        let cmd = CreateRun {
            run: RunId::new(format!("run-{i}")).expect("run id"),
            input_digest: digest_of(format!("input {i}").as_bytes()),
            agent_version: "1".into(),
            trace_id: "t".into(),
            parent: None,
            input: None,
        };
        engine.create_run(cmd).expect("create_run");
    }
    let stats = engine.wal_stats();
    assert!(stats.grows >= 2, "{stats:?}");
    assert_eq!(
        stats.inline_grows, 0,
        "no commit waited for a grow: {stats:?}"
    );
    engine.close().expect("close");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("reopen");
    for i in 0..RUNS {
        let run = RunId::new(format!("run-{i}")).expect("run id");
        assert!(engine.run(&run).expect("read").is_some(), "run-{i}");
    }
}

fn db_options() -> DbOptions {
    DbOptions {
        wal: WalOptions {
            segment_size_bytes: 64 * 1024,
            segment_first_step_bytes: 8 * 1024,
            max_record_bytes: 4 * 1024,
            ..WalOptions::default()
        },
        database_id: Some(DatabaseId(0x5e65)),
    }
}

fn payload(i: u64) -> Vec<u8> {
    vec![u8::try_from(i % 251).expect("byte"); 900 + usize::try_from(i % 7).expect("small")]
}

/// A power cut at every I/O call in turn, from the first grow of segment 1
/// to a few appends into the grown space: recovery keeps every record
/// acknowledged before the cut (payloads intact), and never reads the
/// grown space's zeros or garbage as records.
#[test]
fn a_crash_at_every_io_call_of_a_grow_loses_no_acknowledged_record() {
    let clock = ManualClock::new(1);
    let dir = Path::new("/db");
    let mut cut_at = 0;
    loop {
        let disk = SimDisk::new(Rng::new(cut_at), FaultConfig::crash_only());
        let storage: Arc<dyn Storage> = Arc::new(disk.clone());
        let (db, _) = Db::open(Arc::clone(&storage), &clock, dir, db_options()).expect("create");
        let mut acked = Vec::new();
        // Past half of the 8 KiB first step: a grow is due.
        for i in 0..4 {
            acked.push(db.wal().append(&[&payload(i)]).expect("append"));
        }
        assert!(db.wal().grow_wanted());
        disk.set_crash_after_ops(cut_at);
        let mut grows = 0;
        let mut i = 4;
        // Bounded: 24 appends, each followed by a grow if one is due.
        let finished = loop {
            if i == 28 {
                break true;
            }
            match db.wal().grow_ahead() {
                Ok(grew) => grows += u64::from(grew),
                Err(_) => break false,
            }
            match db.wal().append(&[&payload(i)]) {
                Ok(lsn) => acked.push(lsn),
                Err(_) => break false,
            }
            i += 1;
        };
        assert_eq!(disk.is_powered_off(), !finished, "cut at {cut_at}");
        if finished {
            assert!(grows >= 2, "the segment grew more than once: {grows}");
        }
        drop(db);
        disk.crash(&mut Rng::new(cut_at ^ 0x96));
        let (db, _) = Db::open(Arc::clone(&storage), &clock, dir, db_options())
            .unwrap_or_else(|e| panic!("open after a cut at I/O call {cut_at}: {e}"));
        let durable = db.wal().durable_lsn();
        let last_acked = acked.last().copied().expect("acked");
        assert!(
            durable >= last_acked,
            "cut at {cut_at}: {durable} < {last_acked}"
        );
        let records: Vec<(Lsn, Vec<u8>)> = db
            .wal()
            .read_from(Lsn::ZERO)
            .expect("read")
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("read after a cut at {cut_at}: {e}"));
        assert_eq!(records.len() as u64, durable.0, "cut at {cut_at}");
        for (k, (lsn, bytes)) in records.iter().enumerate() {
            assert_eq!(*lsn, Lsn(k as u64 + 1));
            assert_eq!(*bytes, payload(k as u64), "cut at {cut_at}, {lsn}");
        }
        // The log takes appends after the cut, into whatever space the
        // segment has, growing it as needed.
        let next = db
            .wal()
            .append(&[&payload(durable.0)])
            .expect("append after the cut");
        assert_eq!(next, durable.next());
        let path = segment_path(&dir.join("wal"), SegmentId(1));
        assert!(
            storage
                .open(&path, actum::OpenMode::Existing)
                .expect("segment 1")
                .len()
                .expect("len")
                > SEGMENT_HEADER_BYTES
        );
        drop(db);
        if finished {
            break;
        }
        cut_at += 1;
        assert!(cut_at < 2000, "the workload never finished");
    }
    assert!(
        cut_at > 20,
        "the grows and appends take many I/O calls: {cut_at}"
    );
}

/// A run whose input is `input_bytes` bytes, distinct per `i`.
fn run_with_input(i: u32, input_bytes: usize) -> (CreateRun, Vec<u8>) {
    let mut input = vec![u8::try_from(i % 251).expect("byte"); input_bytes];
    input[..4].copy_from_slice(&i.to_le_bytes());
    let cmd = CreateRun {
        run: RunId::new(format!("run-{i}")).expect("run id"),
        input_digest: digest_of(&input),
        agent_version: "1".into(),
        trace_id: "t".into(),
        parent: None,
        input: Some(input.clone()),
    };
    (cmd, input)
}

/// The log's files in a `files` listing.
fn segments(listing: &[(String, u64)]) -> Vec<&(String, u64)> {
    listing
        .iter()
        .filter(|(n, _)| n.ends_with(".wal"))
        .collect()
}

/// A workload that writes about 20 MiB of log (rotating past one 16 MiB
/// segment, so a spare is kept and recycled into the prepared one) leaves,
/// once closed cleanly, a log of first steps: the closing checkpoint put
/// everything the log held into the state store. Every run is there after
/// a reopen.
#[test]
fn a_clean_close_shrinks_a_grown_log_back_to_its_first_step() {
    const RUNS: u32 = 320;
    const INPUT_BYTES: usize = 64 * 1024;
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("create");
    for i in 0..RUNS {
        let (cmd, _) = run_with_input(i, INPUT_BYTES);
        engine.create_run(cmd).expect("create_run");
    }
    let written = engine.wal_stats().bytes;
    let open = files(dir.path());
    engine.close().expect("close");
    let closed = files(dir.path());
    let log_bytes =
        |listing: &[(String, u64)]| -> u64 { segments(listing).iter().map(|(_, len)| len).sum() };
    let state_bytes: u64 = closed
        .iter()
        .filter(|(n, _)| n.ends_with(".redb"))
        .map(|(_, len)| len)
        .sum();
    println!(
        "{written} bytes of log written; open: log {} bytes {:?}; closed: log {} bytes {:?}, \
         directory {} bytes (state store {state_bytes})",
        log_bytes(&open),
        segments(&open),
        log_bytes(&closed),
        segments(&closed),
        total(&closed)
    );
    assert!(written > 16 << 20, "the log rotated: {written} bytes");
    assert!(
        segments(&open).iter().any(|(_, len)| *len > 1 << 20),
        "the log grew while open: {open:?}"
    );
    assert!(
        total(&closed) <= EMPTY_DATABASE_BYTES_MAX + state_bytes,
        "a closed database's log takes {} bytes: {closed:?}",
        log_bytes(&closed)
    );
    for (name, len) in segments(&closed) {
        assert_eq!(*len, SEGMENT_FIRST_STEP_BYTES_DEFAULT, "{name}: {closed:?}");
    }
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("reopen");
    assert_eq!(engine.recovery().replayed_records, 0);
    for i in 0..RUNS {
        let (cmd, input) = run_with_input(i, INPUT_BYTES);
        assert!(engine.run(&cmd.run).expect("read").is_some(), "run-{i}");
        assert_eq!(engine.run_input(&cmd.run).expect("input"), Some(input));
    }
    // The log takes commits again, from its first step.
    let (cmd, _) = run_with_input(RUNS, INPUT_BYTES);
    engine.create_run(cmd.clone()).expect("create after reopen");
    engine.close().expect("close again");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("reopen again");
    assert!(engine.run(&cmd.run).expect("read").is_some());
    engine.close().expect("close at last");
}

const SIM_DIR: &str = "/db";

fn sim_options() -> EngineOptions {
    EngineOptions {
        db: DbOptions {
            wal: WalOptions {
                segment_size_bytes: 64 * 1024,
                segment_first_step_bytes: 8 * 1024,
                max_record_bytes: 16 * 1024,
                ..WalOptions::default()
            },
            database_id: Some(DatabaseId(0x5421)),
        },
        // Rare enough that a checkpoint covers two segments at once: one
        // file is recycled into the next segment, the other kept spare.
        checkpoint_every_records: 40,
        // Any clean close that finds a sixteenth of the state store free
        // (after a session that wrote a sixteenth of it) compacts it, so
        // the cuts of a close land in a compaction too.
        compact_at_close_free_bytes: 1,
        ..EngineOptions::default()
    }
}

/// Power cuts tear or lose unsynced writes; redb's file tears only whole
/// sectors (as in the engine's crash-at-every-I/O test).
fn sim_faults() -> FaultConfig {
    FaultConfig {
        sector_atomic_suffixes: vec![".redb".to_owned()],
        ..FaultConfig::crash_only()
    }
}

fn sim_open(disk: &SimDisk) -> Engine {
    let storage: Arc<dyn Storage> = Arc::new(disk.clone());
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1));
    Engine::open_with(storage, clock, Path::new(SIM_DIR), sim_options()).expect("open")
}

/// The state store's visible length on `disk`.
fn sim_state_bytes(disk: &SimDisk) -> u64 {
    disk.snapshot()
        .into_iter()
        .find(|(path, _)| path == "/db/state.redb")
        .map_or(0, |(_, bytes)| bytes.len() as u64)
}

/// The log's files on `disk` with their visible lengths.
fn sim_segments(disk: &SimDisk) -> Vec<(String, u64)> {
    disk.snapshot()
        .into_iter()
        .filter(|(path, _)| path.starts_with("/db/wal/") && path.ends_with(".wal"))
        .map(|(path, bytes)| (path, bytes.len() as u64))
        .collect()
}

/// Every run up to `runs` is there with its input.
fn assert_runs(engine: &Engine, runs: u32, cut_at: u64) {
    for i in 0..runs {
        let (cmd, input) = run_with_input(i, SIM_INPUT_BYTES);
        assert_eq!(
            engine
                .run_input(&cmd.run)
                .unwrap_or_else(|e| panic!("cut at {cut_at}, run-{i}: {e}")),
            Some(input),
            "cut at {cut_at}: run-{i}"
        );
    }
}

const SIM_INPUT_BYTES: usize = 3000;

/// A power cut at every I/O call of a clean close in turn, after a
/// workload that rotated through several 64 KiB segments (spares kept, the
/// active one grown past its 8 KiB first step): the database opens with
/// the books as they were before the close (every acknowledged run and its
/// input), takes commands, and its next clean close leaves a log of first
/// steps.
#[test]
fn a_crash_at_every_io_call_of_a_clean_close_loses_nothing() {
    for seed in [7, 8, 9] {
        let close_ops = crash_every_io_call_of_a_close(seed);
        println!("seed {seed}: a clean close took {close_ops} I/O calls, each cut in turn");
        assert!(close_ops >= 10, "the shrink's calls were cut: {close_ops}");
    }
}

/// The close of [`a_crash_at_every_io_call_of_a_clean_close_loses_nothing`]
/// cut at each of its I/O calls in turn, each crash's tears drawn from
/// `seed` and the call's index; returns how many calls the close makes.
fn crash_every_io_call_of_a_close(seed: u64) -> u64 {
    const RUNS: u32 = 50;
    let first_step = sim_options().db.wal.first_step_bytes();
    let mut cut_at = 1;
    let close_ops = loop {
        let disk = SimDisk::new(Rng::new(seed).fork("disk"), sim_faults());
        let engine = sim_open(&disk);
        for i in 0..RUNS {
            let (cmd, _) = run_with_input(i, SIM_INPUT_BYTES);
            engine.create_run(cmd).expect("create_run");
        }
        let before = sim_segments(&disk);
        // The active segment, the prepared one and a spare, grown.
        assert!(
            before.len() >= 3 && before.iter().any(|(_, len)| *len > first_step),
            "the log grew and rotated, and keeps a spare: {before:?}"
        );
        let books = engine.snapshot().expect("books");
        let state_before = sim_state_bytes(&disk);
        let ops_before = disk.ops_count();
        disk.set_crash_after_ops(cut_at);
        let closed = engine.close();
        if closed.is_ok() && !disk.is_powered_off() {
            let after = sim_segments(&disk);
            assert!(
                after.iter().all(|(_, len)| *len == first_step) && after.len() <= 2,
                "closed: {after:?}, before the close: {before:?}"
            );
            println!("the log before the close: {before:?}; after: {after:?}");
            let state_after = sim_state_bytes(&disk);
            println!(
                "the state store before the close: {state_before} bytes; after: {state_after}"
            );
            // The close's checkpoint doubles the file (its copy-on-write
            // pages go past the end); compaction brings it back.
            assert!(
                state_after <= state_before,
                "the close compacted the state store: {state_before} -> {state_after} bytes"
            );
            let close_ops = disk.ops_count() - ops_before;
            disk.disarm_crash();
            let engine = sim_open(&disk);
            assert_eq!(engine.snapshot().expect("books"), books, "seed {seed}");
            assert_runs(&engine, RUNS, cut_at);
            engine.close().expect("close");
            break close_ops;
        }
        assert!(
            disk.is_powered_off(),
            "seed {seed}, cut at {cut_at}: {closed:?}"
        );
        disk.crash(&mut Rng::new(seed ^ (cut_at << 8)).fork("crash"));
        let engine = sim_open(&disk);
        assert_eq!(
            engine.snapshot().expect("books"),
            books,
            "seed {seed}, cut at {cut_at}"
        );
        assert_runs(&engine, RUNS, cut_at);
        let (cmd, _) = run_with_input(RUNS, SIM_INPUT_BYTES);
        engine.create_run(cmd).unwrap_or_else(|e| {
            panic!("seed {seed}, cut at {cut_at}: a command after the cut: {e}")
        });
        engine.close().expect("a close with no cut");
        let after = sim_segments(&disk);
        assert!(
            after.iter().all(|(_, len)| *len <= first_step),
            "seed {seed}, cut at {cut_at}: the next close shrank the log: {after:?}"
        );
        let engine = sim_open(&disk);
        assert_runs(&engine, RUNS + 1, cut_at);
        engine.close().expect("close");
        cut_at += 1;
        assert!(cut_at < 500, "the close never finished");
    };
    assert_eq!(
        cut_at,
        close_ops + 1,
        "every call of the close was cut once"
    );
    close_ops
}

/// A close asks redb for the state store's free pages (a walk of every
/// table, a read of the whole file) only after a session that wrote at
/// least a sixteenth of the file ("Compaction at close"): the close of a
/// session that only read reads a few pages of a store with free pages to
/// give back (the walk reads every page redb's cache lacks, and compacts),
/// and the next session that writes enough compacts it.
#[test]
fn a_close_after_a_session_that_only_read_does_not_walk_the_state_store() {
    const RUNS: u32 = 50;
    let disk = SimDisk::new(Rng::new(11).fork("disk"), sim_faults());
    let reads = Arc::new(AtomicU64::new(0));
    let open = |compact: bool| {
        let counted = Arc::clone(&reads);
        let storage: Arc<dyn Storage> =
            Arc::new(OnRead::new(Arc::new(disk.clone()), move |path| {
                if path.ends_with("state.redb") {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
            }));
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1));
        let options = EngineOptions {
            compact_at_close_free_bytes: u64::from(compact),
            ..sim_options()
        };
        Engine::open_with(storage, clock, Path::new(SIM_DIR), options).expect("open")
    };
    // A close that does not compact: its checkpoint's copy-on-write pages
    // leave free pages in the file.
    let engine = open(false);
    for i in 0..RUNS {
        let (cmd, _) = run_with_input(i, SIM_INPUT_BYTES);
        engine.create_run(cmd).expect("create_run");
    }
    engine.close().expect("close without compacting");
    let left = sim_state_bytes(&disk);
    let pages = left / 4096;
    // A session that only reads.
    let engine = open(true);
    assert_runs(&engine, RUNS, 0);
    let before = reads.load(Ordering::Relaxed);
    engine.close().expect("close after reads");
    let read_at_close = reads.load(Ordering::Relaxed) - before;
    let after_reads = sim_state_bytes(&disk);
    // A session that writes more than a sixteenth of the file.
    let engine = open(true);
    let more = RUNS + 10;
    for i in RUNS..more {
        let (cmd, _) = run_with_input(i, SIM_INPUT_BYTES);
        engine.create_run(cmd).expect("create_run");
    }
    let before = reads.load(Ordering::Relaxed);
    let before_close = sim_state_bytes(&disk);
    engine.close().expect("close after writes");
    let read_at_compacting_close = reads.load(Ordering::Relaxed) - before;
    let compacted = sim_state_bytes(&disk);
    println!(
        "state store: {left} bytes ({pages} pages) after a close that did not compact; the close \
         of a session that only read read {read_at_close} times and left {after_reads} bytes; the \
         close of a session that wrote read {read_at_compacting_close} times, {before_close} -> \
         {compacted} bytes"
    );
    assert!(
        read_at_close * 10 < pages,
        "the close of a session that only read walked the store: {read_at_close} reads of a \
         {pages}-page file"
    );
    assert!(
        read_at_compacting_close >= pages / 2 && compacted < before_close.min(left),
        "the close after a session that wrote looked and compacted: {read_at_compacting_close} \
         reads, {before_close} -> {compacted} bytes"
    );
    let engine = open(true);
    assert_runs(&engine, more, 0);
    engine.close().expect("close");
}
