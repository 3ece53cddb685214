//! A small database is small: WAL segments start at their first step and
//! grow ahead of need in zero-filled, synced steps (docs/DURABILITY.md,
//! "Growing a segment"), so an empty database takes under a mebibyte, and a
//! crash at any I/O call of a grow loses no acknowledged record.

use std::path::Path;
use std::sync::Arc;

use actum::books::{CreateRun, RunId, digest_of};
use actum::db::{Db, DbOptions};
use actum::wal::format::{SEGMENT_HEADER_BYTES, segment_path};
use actum::wal::{SEGMENT_FIRST_STEP_BYTES_DEFAULT, WalOptions};
use actum::{DatabaseId, Engine, EngineOptions, Lsn, ManualClock, SegmentId, Storage};
use actum_sim::{FaultConfig, Rng, SimDisk};

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
