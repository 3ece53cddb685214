//! Retention on the public API: a run that is over leaves the books whole
//! once it is old enough and its ledger's dedup windows have passed, the
//! blobs no kept run references go with it, and what it left stays gone
//! across a restart. Under a steady stream of runs that start, act, save a
//! checkpoint and complete, with pruning after every automatic
//! checkpoint, the database's files stop growing once warm.
//!
//! `ACTUM_RETENTION_RUNS` sets the length of the stream (100,000 by
//! default; the test command, `./test.sh`, runs 50,000: in a run of
//! 50,000 the files reached their final 37,753,856 bytes at 10,000 runs
//! and held it, 2026-11-29; 35,656,704 since blobs became a stream,
//! schema 13, 2026-11-30).

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use actum::books::{
    BeginEffect, Command, FinishEffect, Outcome, Part, RunState, SaveCheckpoint, ToolClass,
    Transition, digest_of,
};
use actum::engine::{Begun, EngineOptions, Retention};
use actum::{Engine, FsStorage, ManualClock, Storage};
use support::*;

/// Saves a checkpoint of `run` with a part every run shares and one of its own.
fn save(run: &str, guard: &actum::books::Guard) -> Command {
    Command::SaveCheckpoint(SaveCheckpoint {
        run: rid(run),
        guard: guard.clone(),
        schema_version: 1,
        parts: vec![
            Part {
                name: "plan".into(),
                bytes: vec![7; 2_048],
                extends: None,
                inline: false,
            },
            Part {
                name: "notes".into(),
                bytes: format!("the notes of {run}").repeat(32).into_bytes(),
                extends: None,
                inline: false,
            },
        ],
    })
}

/// One run of the stream: created, leased and started in one commit, an
/// act on a queryable tool (no dedup window to wait out) with its stored
/// arguments, then the outcome, a checkpoint and its end in one commit.
fn one_run(engine: &Engine, name: &str) {
    one_run_with(engine, name, ToolClass::Queryable);
}

/// [`one_run`] acting on a tool of class `tool_class`.
fn one_run_with(engine: &Engine, name: &str, tool_class: ToolClass) {
    let run = rid(name);
    let worker = wid("w1");
    engine.create_run(create_cmd(name)).unwrap();
    let lease = engine.acquire_lease(&run, &worker, LEASE_MS).unwrap();
    let g = lease.guard;
    engine
        .transition(Transition {
            run: run.clone(),
            guard: g.clone(),
            to: RunState::Running,
            expected_version: None,
            reason: "start".into(),
        })
        .unwrap();
    let args = format!("pay the invoice of {name}").into_bytes();
    let begun = engine
        .begin_effect(BeginEffect {
            run: run.clone(),
            step: sid("pay"),
            guard: g.clone(),
            tool: "bank.pay".into(),
            tool_class,
            args_digest: digest_of(&args),
            args: Some(args),
            rationale: "the invoice is due".into(),
            compensation: None,
        })
        .unwrap();
    let Begun::Proceed { key, .. } = begun else {
        panic!("{begun:?}")
    };
    let finish = Command::FinishEffect(FinishEffect {
        key,
        guard: g.clone(),
        outcome: Outcome::Confirmed {
            receipt: b"paid".to_vec(),
        },
    });
    let end = Command::Transition(Transition {
        run,
        guard: g.clone(),
        to: RunState::Completed,
        expected_version: None,
        reason: "done".into(),
    });
    engine
        .commit_batch(vec![finish, save(name, &g), end])
        .unwrap();
}

/// Every file below `dir` with its size, by path.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            found.extend(files(&entry.path()));
        } else {
            found.push((entry.path(), meta.len()));
        }
    }
    found.sort();
    found
}

/// The bytes of every file below `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    files(dir).iter().map(|(_, len)| len).sum()
}

fn open(dir: &Path, clock: &Arc<ManualClock>, retention: Retention) -> Engine {
    let options = EngineOptions {
        retention,
        ..EngineOptions::default()
    };
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    Engine::open_with(storage, clock.clone(), dir, options).unwrap()
}

#[test]
fn a_pruned_run_leaves_whole_with_its_own_blobs_and_stays_gone_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open(dir.path(), &clock, Retention::default());
    one_run(&engine, "inv-1");
    one_run(&engine, "inv-2");
    let own = digest_of("the notes of inv-1".repeat(32).as_bytes());
    let shared = digest_of(&[7; 2_048]);
    engine.checkpoint().unwrap();
    // Too young for a day's retention; any age for none.
    assert!(engine.prune(86_400_000, 10).unwrap().pruned.is_empty());
    let done = engine
        .prune_runs(vec![rid("inv-1"), rid("nobody")], 0)
        .unwrap();
    assert_eq!(done.pruned, [rid("inv-1")]);
    assert!(done.kept[0].1.contains("does not exist"), "{:?}", done.kept);
    let gone = |engine: &Engine| {
        engine.run(&rid("inv-1")).unwrap().is_none()
            && engine.read(|b| Ok(b.blob(&own).is_none())).unwrap()
            && engine.read(|b| Ok(b.blob(&shared).is_some())).unwrap()
    };
    assert!(gone(&engine), "before a checkpoint");
    drop(engine);
    let engine = open(dir.path(), &clock, Retention::default());
    assert!(gone(&engine), "after a crash and a replay");
    engine.checkpoint().unwrap();
    assert!(gone(&engine), "from the state store");
    assert!(engine.effects(&rid("inv-1")).is_err());
    // The last run referencing the shared part takes it along.
    assert_eq!(engine.prune(0, 10).unwrap().pruned, [rid("inv-2")]);
    engine.checkpoint().unwrap();
    assert!(engine.read(|b| Ok(b.blob(&shared).is_none())).unwrap());
    engine.close().unwrap();
}

/// A store of schema 12 (blobs as rows of `books_blobs`, digest -> bytes),
/// made from one of this build by moving every blob of the stream into
/// that table with redb itself: its blobs read, a save of bytes it holds
/// does not write them again, and a prune deletes them where they are.
#[test]
fn a_store_of_schema_12_keeps_its_blob_rows_and_prunes_them_where_they_are() {
    use redb::{ReadableDatabase, ReadableTable, TableDefinition};
    const BLOBS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("books_blobs");
    const INDEX: TableDefinition<&[u8], u64> = TableDefinition::new("books_blob_index");
    const CHUNKS: TableDefinition<u64, &[u8]> = TableDefinition::new("books_blob_chunks");
    const COUNTS: TableDefinition<&str, u64> = TableDefinition::new("books_blob_stream");
    const META: TableDefinition<&str, u64> = TableDefinition::new("actum_meta");
    const CHUNK: u64 = 4080;

    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open(dir.path(), &clock, Retention::default());
    one_run(&engine, "inv-1");
    one_run(&engine, "inv-2");
    engine.close().unwrap();
    let own = digest_of("the notes of inv-1".repeat(32).as_bytes());
    let shared = digest_of(&[7; 2_048]);

    // Back to schema 12: each record (len u32 LE, digest, bytes: docs/
    // FORMAT.md, "Blob stream") becomes a row; the stream's tables go.
    let state = dir.path().join("state.redb");
    let db = redb::Database::open(&state).unwrap();
    let txn = db.begin_write().unwrap();
    let mut moved = 0;
    {
        let index = txn.open_table(INDEX).unwrap();
        let chunks = txn.open_table(CHUNKS).unwrap();
        let mut blobs = txn.open_table(BLOBS).unwrap();
        let span = |at: u64, len: u64| -> Vec<u8> {
            (at..at + len)
                .map(|i| chunks.get(i / CHUNK).unwrap().unwrap().value()[(i % CHUNK) as usize])
                .collect()
        };
        for row in index.iter().unwrap() {
            let (digest, at) = row.unwrap();
            let header = span(at.value(), 36);
            assert_eq!(&header[4..], digest.value(), "a record names its digest");
            let len = u32::from_le_bytes(header[..4].try_into().unwrap());
            let bytes = span(at.value() + 36, u64::from(len));
            assert_eq!(digest_of(&bytes).0.as_slice(), digest.value());
            blobs.insert(digest.value(), bytes.as_slice()).unwrap();
            moved += 1;
        }
    }
    assert!(
        moved >= 4,
        "arguments, receipts' parts and checkpoint parts: {moved}"
    );
    assert!(txn.delete_table(INDEX).unwrap());
    assert!(txn.delete_table(CHUNKS).unwrap());
    assert!(txn.delete_table(COUNTS).unwrap());
    txn.open_table(META)
        .unwrap()
        .insert("schema_version", 12)
        .unwrap();
    txn.commit().unwrap();
    drop(db);
    // The sums describe the file as the engine's close left it.
    std::fs::remove_file(dir.path().join("state.redb.sums")).unwrap();

    let engine = open(dir.path(), &clock, Retention::default());
    let has = |engine: &Engine, d| engine.read(|b| Ok(b.blob(&d).is_some())).unwrap();
    assert!(has(&engine, own) && has(&engine, shared));
    one_run(&engine, "inv-3");
    assert_eq!(
        engine.prune_runs(vec![rid("inv-1")], 0).unwrap().pruned,
        [rid("inv-1")]
    );
    engine.checkpoint().unwrap();
    assert!(!has(&engine, own) && has(&engine, shared));
    engine.close().unwrap();

    let db = redb::Database::open(&state).unwrap();
    let txn = db.begin_read().unwrap();
    let blobs = txn.open_table(BLOBS).unwrap();
    assert!(
        blobs.get(own.0.as_slice()).unwrap().is_none(),
        "pruned from its row"
    );
    assert!(blobs.get(shared.0.as_slice()).unwrap().is_some());
    let index = txn.open_table(INDEX).unwrap();
    assert!(
        index.get(shared.0.as_slice()).unwrap().is_none(),
        "not written twice"
    );
    let notes = digest_of("the notes of inv-3".repeat(32).as_bytes());
    assert!(
        index.get(notes.0.as_slice()).unwrap().is_some(),
        "new blobs go to the stream"
    );
    let version = txn
        .open_table(META)
        .unwrap()
        .get("schema_version")
        .unwrap()
        .unwrap()
        .value();
    assert_eq!(version, actum::state::STATE_SCHEMA_VERSION);
}

/// `verify` holds the blob stream to its index: a `live` count one byte
/// short, or one more than the stream holds (edited with redb itself), is
/// damage, named.
#[test]
fn verify_finds_a_blob_stream_whose_live_count_does_not_hold() {
    for (off_by, named) in [
        (-1, "live bytes; its index names"),
        (1, "counts do not hold"),
    ] {
        live_count_off_by(off_by, named);
    }
}

fn live_count_off_by(off_by: i64, named: &str) {
    use redb::{ReadableTable, TableDefinition};
    const COUNTS: TableDefinition<&str, u64> = TableDefinition::new("books_blob_stream");
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let engine = open(dir.path(), &clock, Retention::default());
    one_run(&engine, "inv-1");
    engine.close().unwrap();
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    let report = actum::verify::verify_dir(storage.clone(), dir.path()).unwrap();
    assert!(!report.damaged(), "{:?}", report.findings);
    let db = redb::Database::open(dir.path().join("state.redb")).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let mut counts = txn.open_table(COUNTS).unwrap();
        let live = counts.get("live").unwrap().unwrap().value();
        counts
            .insert("live", live.checked_add_signed(off_by).unwrap())
            .unwrap();
    }
    txn.commit().unwrap();
    drop(db);
    std::fs::remove_file(dir.path().join("state.redb.sums")).unwrap();
    let report = actum::verify::verify_dir(storage, dir.path()).unwrap();
    let found: Vec<&str> = report.damage().map(|f| f.what.as_str()).collect();
    assert!(
        found
            .iter()
            .any(|w| w.contains("blob stream") && w.contains(named)),
        "{found:?}"
    );
}

#[test]
fn a_run_kept_by_its_dedup_window_does_not_hold_up_the_runs_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let options = EngineOptions {
        checkpoint_every_records: 100,
        retention: Retention {
            prune_after_ms: Some(60_000),
        },
        ..EngineOptions::default()
    };
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    let engine = Engine::open_with(storage, clock.clone(), dir.path(), options).unwrap();
    // The oldest run to end acted on a tool that deduplicates for an hour;
    // more than a whole prune's worth of runs ended after it.
    let window = ToolClass::Idempotent {
        dedup_window_ms: 3_600_000,
    };
    one_run_with(&engine, "held", window);
    clock.advance_ms(1);
    let behind = actum::books::PRUNE_RUNS_MAX + 44;
    for i in 0..behind {
        one_run(&engine, &format!("inv-{i}"));
    }
    // A minute on, the next automatic checkpoint prunes every run behind
    // the held one, batch after batch, and keeps the held one.
    clock.advance_ms(120_000);
    for i in 0..100 {
        engine
            .create_run(create_cmd(&format!("later-{i}")))
            .unwrap();
    }
    let left: Vec<usize> = (0..behind)
        .filter(|i| engine.run(&rid(&format!("inv-{i}"))).unwrap().is_some())
        .collect();
    assert!(
        left.is_empty(),
        "runs behind the held one were kept: {left:?}"
    );
    assert!(engine.run(&rid("held")).unwrap().is_some());
    let kept = engine.prune_runs(vec![rid("held")], 60_000).unwrap();
    assert!(kept.kept[0].1.contains("dedup window"), "{kept:?}");
    engine.close().unwrap();
}

#[test]
fn under_a_steady_stream_of_runs_the_files_stop_growing() {
    let runs: usize = std::env::var("ACTUM_RETENTION_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let retention = Retention {
        prune_after_ms: Some(0),
    };
    let engine = open(dir.path(), &clock, retention);
    let tenth = runs / 10;
    let mut sizes = Vec::new();
    for i in 0..runs {
        one_run(&engine, &format!("inv-{i}"));
        clock.advance_ms(10);
        if (i + 1) % tenth == 0 {
            sizes.push(dir_bytes(dir.path()));
        }
    }
    println!("database bytes after each tenth of {runs} runs: {sizes:?}");
    for (path, len) in files(dir.path()) {
        let name = path.strip_prefix(dir.path()).unwrap().display();
        println!("  {name}: {len} bytes");
    }
    // Past the first fifth the files hold their size: the pages pruned
    // runs free are reused, and the log's segments are recycled.
    let warm = sizes[1];
    let last = *sizes.last().unwrap();
    assert!(
        last <= warm + warm / 10,
        "the database grew from {warm} bytes at {} runs to {last} at {runs}: {sizes:?}",
        2 * tenth
    );
    assert!(engine.runs_in_memory() < 1_000);
    engine.close().unwrap();
}
