//! Databases for the open-time bench: a history of completed runs, a checkpoint, then a tail
//! of commands the checkpoint does not cover, left as a crash leaves them (the engine dropped,
//! never closed).
//!
//! A history is built in batches (`commit_batch`: `RUNS_PER_BATCH` runs created and leased in
//! one record, then started and completed in a second), four commands per run, so a
//! million-command history takes seconds to write rather than minutes of single commits. What
//! an open reads does not depend on how the history was batched: the history is in the state
//! store, and only the tail is replayed. The tail is single commands (one `create_run` each, one
//! record each), the way a crash finds a busy engine.

use std::path::Path;
use std::time::{Duration, Instant};

use actum::books::{
    AcquireLease, Answer, Command, CreateRun, Guard, RunId, RunState, Transition, WorkerId,
    digest_of,
};
use actum::{Engine, EngineOptions};

/// Runs per pair of history batches.
pub const RUNS_PER_BATCH: u64 = 128;

/// Commands each history run takes: create, lease, start, complete.
pub const COMMANDS_PER_RUN: u64 = 4;

/// Engine options for the bench: the defaults, except that automatic checkpoints are off while
/// the tail is written, so exactly `tail` commands are left for the open to replay, and that the
/// state store's pages are not checked at open: this bench times recovery (load and replay); the
/// check reads the whole state store and is timed on its own (`verify_on_open` example,
/// docs/PERFORMANCE.md, "The page check at open").
pub fn options(auto_checkpoints: bool) -> EngineOptions {
    let mut options = EngineOptions {
        verify_state_on_open: false,
        ..EngineOptions::default()
    };
    if !auto_checkpoints {
        options.checkpoint_every_records = 0;
        options.checkpoint_every_bytes = 0;
    }
    options
}

/// What was built, for the bench's summary line.
#[derive(Clone, Copy, Debug)]
pub struct Built {
    /// Commands in the checkpointed history.
    pub history_commands: u64,
    /// Commands logged after the last checkpoint.
    pub tail_commands: u64,
    /// WAL record bytes of the tail (headers and payloads).
    pub tail_bytes: u64,
    /// How long building took.
    pub took: Duration,
}

/// Builds, in the empty directory `dir`, a database whose history holds `history_commands`
/// commands (rounded up to whole batches), checkpointed, followed by `tail` single
/// `create_run` commands that no checkpoint covers; then drops the engine without closing it.
pub fn build(dir: &Path, history_commands: u64, tail: u64) -> Built {
    let start = Instant::now();
    let runs = history_commands.div_ceil(COMMANDS_PER_RUN);
    let engine = Engine::open(dir, options(true)).expect("create the bench database");
    let worker = WorkerId::new("bench-worker").expect("a valid worker id");
    let mut next = 0;
    while next < runs {
        let count = RUNS_PER_BATCH.min(runs - next);
        history_batch(&engine, &worker, next, count);
        next += count;
    }
    engine.checkpoint().expect("checkpoint the history");
    drop(engine);
    let engine = Engine::open(dir, options(false)).expect("reopen to write the tail");
    let bytes_before = engine.wal_stats().bytes;
    for k in 0..tail {
        engine
            .create_run(create(&format!("tail-{k}")))
            .expect("create a tail run");
    }
    let tail_bytes = engine.wal_stats().bytes - bytes_before;
    // A crash: no close, no final checkpoint.
    drop(engine);
    Built {
        history_commands: runs * COMMANDS_PER_RUN,
        tail_commands: tail,
        tail_bytes,
        took: start.elapsed(),
    }
}

/// Opens the database in `dir` after a crash, as `Engine::open` does; returns how long the open
/// took and how many records it replayed. The engine is dropped without closing, so the next
/// open finds the same tail.
pub fn open_once(dir: &Path) -> (Duration, u64) {
    let start = Instant::now();
    let engine = Engine::open(dir, options(false)).expect("open after a crash");
    let took = start.elapsed();
    let replayed = engine.recovery().replayed_records;
    drop(engine);
    (took, replayed)
}

fn create(run: &str) -> CreateRun {
    CreateRun {
        run: RunId::new(run).expect("a valid run id"),
        input_digest: digest_of(run.as_bytes()),
        agent_version: "bench-agent 1.0".into(),
        trace_id: String::new(),
        parent: None,
        input: None,
    }
}

/// Runs `first .. first + count` of the history: created and leased in one record, started and
/// completed in a second.
fn history_batch(engine: &Engine, worker: &WorkerId, first: u64, count: u64) {
    let names: Vec<String> = (first..first + count).map(|k| format!("run-{k}")).collect();
    let mut opening = Vec::with_capacity(2 * names.len());
    for name in &names {
        opening.push(Command::CreateRun(create(name)));
        opening.push(Command::AcquireLease(AcquireLease {
            run: RunId::new(name.as_str()).expect("a valid run id"),
            worker: worker.clone(),
            ttl_ms: 60_000,
        }));
    }
    let answers = engine.commit_batch(opening).expect("create and lease");
    let mut closing = Vec::with_capacity(2 * names.len());
    for (name, answer) in names.iter().zip(answers.chunks(2)) {
        let Answer::Leased { run, token, .. } = &answer[1] else {
            panic!("a lease on a new run is granted: {answer:?}")
        };
        let guard = Guard {
            run: run.clone(),
            worker: worker.clone(),
            token: *token,
        };
        for to in [RunState::Running, RunState::Completed] {
            closing.push(Command::Transition(Transition {
                run: RunId::new(name.as_str()).expect("a valid run id"),
                guard: guard.clone(),
                to,
                expected_version: None,
                reason: "bench history".into(),
            }));
        }
    }
    engine.commit_batch(closing).expect("start and complete");
}
