//! `Engine::open_snapshot` on a database another engine is committing to:
//! each snapshot holds exactly the books as of the LSN it reports, however
//! checkpoints, segment recycling and retention move the files under it;
//! and a snapshot changes no byte of the directory and takes no lock.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use actum::books::{RUNS_PAGE_MAX, RunId, RunState, Transition};
use actum::engine::{Engine, EngineOptions, Retention};
use actum::{DbOptions, Error, FsStorage, ManualClock, Storage, WalOptions};
use support::*;

const THREADS: usize = 3;
const RUNS_PER_THREAD: usize = 40;

/// Small segments (rotation and recycling every few dozen records),
/// frequent checkpoints, and retention pruning completed runs at once.
fn busy_options() -> EngineOptions {
    EngineOptions {
        checkpoint_every_records: 12,
        retention: Retention {
            prune_after_ms: Some(0),
        },
        db: DbOptions {
            wal: WalOptions {
                segment_size_bytes: 64 * 1024,
                max_record_bytes: 16 * 1024,
                ..WalOptions::default()
            },
            ..DbOptions::default()
        },
        ..EngineOptions::default()
    }
}

/// How long each read waits: the real file system, read slowly, so that
/// checkpoints, rotations and recycling land in the middle of a snapshot's
/// copy (the race the snapshot must detect), not only between copies.
const READ_DELAY: std::time::Duration = std::time::Duration::from_micros(300);

/// Sets its flag when dropped, even by a panic's unwinding.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// One acknowledged command on a run: its LSN lies in `(before, after]`
/// (the writer's durable LSN read just before the call and just after its
/// acknowledgment), and it left the run in `state` at `version`.
#[derive(Clone, Debug)]
struct Step {
    before: u64,
    after: u64,
    state: RunState,
    version: u64,
}

/// Runs `call` and notes the step it made.
fn noted(engine: &Engine, steps: &mut Vec<Step>, call: impl FnOnce() -> (RunState, u64)) {
    let before = engine.durable_lsn().0;
    let (state, version) = call();
    let after = engine.durable_lsn().0;
    steps.push(Step {
        before,
        after,
        state,
        version,
    });
}

/// One writer thread: creates its runs in order, leases, starts and (all
/// but every fifth) completes each.
fn write(engine: &Engine, thread: usize) -> BTreeMap<String, Vec<Step>> {
    let mut model = BTreeMap::new();
    for i in 0..RUNS_PER_THREAD {
        let name = format!("t{thread}-{i:03}");
        let mut steps = Vec::new();
        noted(engine, &mut steps, || {
            let created = engine.create_run(create_cmd(&name)).unwrap();
            (created.state, created.version)
        });
        let mut grant = None;
        noted(engine, &mut steps, || {
            let g = engine
                .acquire_lease(&rid(&name), &wid(&format!("w{thread}")), LEASE_MS)
                .unwrap();
            let version = g.version;
            grant = Some(g);
            (RunState::Pending, version)
        });
        let guard = grant.unwrap().guard;
        let mut to = vec![RunState::Running];
        if i % 5 != 4 {
            to.push(RunState::Completed);
        }
        for to in to {
            noted(engine, &mut steps, || {
                let moved = engine
                    .transition(Transition {
                        run: rid(&name),
                        guard: guard.clone(),
                        to,
                        expected_version: None,
                        reason: "live".into(),
                    })
                    .unwrap();
                (moved.to, moved.version)
            });
        }
        model.insert(name, steps);
    }
    model
}

/// What one snapshot saw: the writer's durable LSN just before it was
/// opened, its own LSN, and its books.
type Seen = (u64, u64, BTreeMap<String, (RunState, u64)>);

/// Every run a snapshot holds: its state and version.
fn books_of(engine: &Engine) -> BTreeMap<String, (RunState, u64)> {
    let mut out = BTreeMap::new();
    let mut after: Option<RunId> = None;
    // Bounded by the number of runs.
    loop {
        let page = engine.runs(None, after.as_ref(), RUNS_PAGE_MAX).unwrap();
        for run in &page {
            out.insert(run.id.to_string(), (run.state, run.version));
        }
        if page.len() < RUNS_PAGE_MAX {
            return out;
        }
        after = page.last().map(|r| r.id.clone());
    }
}

/// What a snapshot as of `lsn` may show of a run with `steps`: absent
/// (`None`) or a state and version it had at `lsn`. A step whose LSN is
/// known only to lie around `lsn` allows both sides; a completed run may
/// have been pruned by retention.
fn allowed_at(steps: &[Step], lsn: u64) -> Vec<Option<(RunState, u64)>> {
    let definite = steps.iter().take_while(|s| s.after <= lsn).count();
    let mut counts = vec![definite];
    if steps.get(definite).is_some_and(|s| s.before < lsn) {
        counts.push(definite + 1);
    }
    let mut allowed: Vec<Option<(RunState, u64)>> = counts
        .iter()
        .map(|&n| n.checked_sub(1).map(|k| (steps[k].state, steps[k].version)))
        .collect();
    if allowed
        .iter()
        .any(|a| a.is_some_and(|(state, _)| state == RunState::Completed))
    {
        allowed.push(None);
    }
    allowed
}

#[test]
fn snapshots_beside_a_busy_writer_hold_exactly_the_books_at_their_lsn() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let storage: Arc<dyn Storage> = Arc::new(FsStorage::new());
    let writer = Engine::open_with(
        Arc::clone(&storage),
        clock.clone(),
        dir.path(),
        busy_options(),
    )
    .unwrap();
    let done = AtomicBool::new(false);
    let mut seen: Vec<Seen> = Vec::new();
    let mut model: BTreeMap<String, Vec<Step>> = BTreeMap::new();
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                let writer = &writer;
                scope.spawn(move || write(writer, t))
            })
            .collect();
        let reader = scope.spawn(|| {
            let mut seen = Vec::new();
            let mut unstable = 0u32;
            let slow: Arc<dyn Storage> = Arc::new(OnRead::new(Arc::new(FsStorage::new()), |_| {
                std::thread::sleep(READ_DELAY);
            }));
            // Bounded by the writers' work: they end, and set `done`.
            while !done.load(Ordering::SeqCst) || seen.len() < 3 {
                let acknowledged = writer.durable_lsn().0;
                // Every other snapshot reads slowly, so that the files
                // change in the middle of its copies.
                let through = if (seen.len() + unstable as usize).is_multiple_of(2) {
                    Arc::clone(&storage)
                } else {
                    Arc::clone(&slow)
                };
                let snapshot = match Engine::open_snapshot_with(
                    through,
                    clock.clone(),
                    dir.path(),
                    busy_options(),
                ) {
                    Ok(snapshot) => snapshot,
                    // Every copy changed under it: refused, never wrong.
                    Err(Error::SnapshotUnstable { dir: named, .. }) => {
                        assert_eq!(named, dir.path());
                        unstable += 1;
                        continue;
                    }
                    Err(other) => panic!("a snapshot failed: {other}"),
                };
                let lsn = snapshot.snapshot_lsn().unwrap().0;
                assert_eq!(lsn, snapshot.durable_lsn().0);
                seen.push((acknowledged, lsn, books_of(&snapshot)));
            }
            seen
        });
        // The reader stops even if a writer panics.
        let stop = StopOnDrop(&done);
        for handle in writers {
            model.extend(handle.join().unwrap());
        }
        drop(stop);
        seen = reader.join().unwrap();
    });
    let end = writer.durable_lsn().0;
    assert!(
        writer.wal_stats().fsyncs > 0 && seen.len() >= 3,
        "{} snapshots",
        seen.len()
    );
    let mut mid_run = 0;
    for (acknowledged, lsn, books) in &seen {
        assert!(
            lsn >= acknowledged,
            "a snapshot at {lsn} misses records acknowledged up to {acknowledged}"
        );
        assert!(*lsn <= end, "a snapshot at {lsn} past the log's end {end}");
        if *lsn > 0 && *lsn < end {
            mid_run += 1;
        }
        for run in books.keys() {
            assert!(model.contains_key(run), "at {lsn}: {run} was never created");
        }
        for (run, steps) in &model {
            let shown = books.get(run).copied();
            let allowed = allowed_at(steps, *lsn);
            assert!(
                allowed.contains(&shown),
                "a snapshot at LSN {lsn} shows {run} as {shown:?}, where only {allowed:?} \
                 held then (steps {steps:?})"
            );
        }
    }
    assert!(mid_run >= 1, "no snapshot was taken while the writer wrote");
    writer.close().unwrap();
}

/// Every file under `dir` with its bytes.
fn every_file(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_snapshot_changes_no_byte_even_of_a_torn_tail_and_takes_no_lock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(START_MS));
    let writer = open_fs(dir.path(), &clock);
    for i in 0..6 {
        writer.create_run(create_cmd(&format!("r{i}"))).unwrap();
        if i == 2 {
            writer.checkpoint().unwrap();
        }
    }
    let acknowledged = writer.durable_lsn().0;
    drop(writer); // A crash: the last records are in the log only.

    // Tear the last record: flip the last byte written past a segment's
    // 4096-byte header, in the newest segment holding records.
    let wal = dir.path().join("wal");
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segments.sort();
    let (path, mut bytes, last) = segments
        .iter()
        .rev()
        .find_map(|path| {
            let bytes = std::fs::read(path).unwrap();
            let last = bytes
                .iter()
                .rposition(|&b| b != 0)
                .filter(|&at| at >= 4096)?;
            Some((path.clone(), bytes, last))
        })
        .unwrap();
    bytes[last] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();

    let before = every_file(dir.path());
    let snapshot = Engine::open_snapshot(dir.path(), EngineOptions::default()).unwrap();
    let lsn = snapshot.snapshot_lsn().unwrap().0;
    assert!(lsn < acknowledged, "the torn record is cut, in memory");
    assert_eq!(books_of(&snapshot).len() as u64, lsn);
    // Commands land in memory only.
    snapshot.create_run(create_cmd("what-if")).unwrap();
    snapshot.checkpoint().unwrap();
    // No lock is held: a read-only open (which takes the real lock) works
    // beside it, and sees the same LSN.
    let read_only = Engine::open_read_only(dir.path(), EngineOptions::default()).unwrap();
    assert_eq!(read_only.durable_lsn().0, lsn);
    drop(read_only);
    drop(snapshot);
    assert_eq!(every_file(dir.path()), before, "no byte changed");
}
