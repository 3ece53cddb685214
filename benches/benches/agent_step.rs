//! Whole agent steps, large checkpoint saves and point reads, on the engine over the real disk.
//!
//! - `agent_step/step/T`: one iteration is one agent step on a leased run, T writer threads
//!   each with its own run: the effect intent, a simulated act (no I/O), the outcome
//!   (`Engine::step`), then `save_checkpoint` of the run's 10 KiB state (10 parts of 1 KiB)
//!   with exactly one part changed: three durable commits.
//! - `agent_step/step_batched/T`: the same, with the outcome and the checkpoint committed
//!   together (`begin_step`, act, `finish_step_with(.., [save])`): two durable commits.
//! - `agent_step/{raw_ceiling,raw_floor,redb,sqlite_shared}/T`: the peers doing the durable
//!   work of `agent_step/step` (`actum_benches::peer_step`): per step the intent (256 bytes),
//!   the outcome (256 bytes), then the changed 1 KiB part with 640 bytes of checkpoint metadata
//!   in one transaction: three durable commits, 2,176 bytes. The raw ceiling group-commits them
//!   into a preallocated file, the raw floor gives each its own `pwrite` and `fdatasync`, redb
//!   uses `Durability::Immediate` transactions, SQLite one connection behind a mutex (WAL,
//!   `synchronous=FULL`).
//! - `checkpoint_save/1MiB_one_part_changed`: one iteration saves a 1 MiB state (256 parts of
//!   4 KiB) with one part changed; the summary gives bytes written per save.
//! - `point_read/{effect,load_latest}/{hot,checkpointed}`: `Engine::effect` of a settled
//!   ledger entry and `Engine::load_latest` of a run's 10 KiB checkpoint, before any
//!   checkpoint wrote them to the state store (hot: in memory) and after (checkpointed: read
//!   from redb, as settled entries and stored blobs are in steady state).
//!
//! - `agent_run/{by_hand,runtime}/T`: one iteration is a whole agent run of 8 steps (its
//!   creation with its input, claim, start, per step the intent and the outcome with a 1 KiB
//!   checkpoint, the output with the move to completed), by hand with the engine's calls or
//!   through `actum::runtime` (a registered handler, `Runtime::work_once`), T threads; the same
//!   durable commits on both sides, so the ratio is what the runtime adds. Throughput counts
//!   steps.
//!
//! Bytes written are counted under the engine (`actum_benches::counting`) and printed to stderr
//! after each step and save bench, a final checkpoint included so the state store's share is in.
//! Run: `cargo bench -p actum-benches --bench agent_step`.

use std::time::{Duration, Instant};

use actum::books::SaveCheckpoint;
use actum_benches::WRITER_COUNTS;
use actum_benches::agent::{
    CheckpointRun, SCHEMA_VERSION, STEP_PART_BYTES, STEP_STATE_PARTS, StepEngine, initial_state,
};
use actum_benches::peer_step::AgentStep;
use actum_benches::protocol::ProtocolEngine;
use actum_benches::runner::{bench_peers, bench_system};
use actum_benches::runtime::{AgentRuns, RUN_STEPS};
use actum_benches::settle_scratch;
use criterion::{Criterion, SamplingMode, Throughput};

fn agent_steps(c: &mut Criterion) {
    let mut group = c.benchmark_group("agent_step");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1));
    for threads in WRITER_COUNTS {
        bench_system(&mut group, "step", threads, || {
            StepEngine::new(threads, false)
        });
        bench_system(&mut group, "step_batched", threads, || {
            StepEngine::new(threads, true)
        });
        bench_peers(&mut group, threads, AgentStep);
    }
    group.finish();
}

fn agent_runs(c: &mut Criterion) {
    let mut group = c.benchmark_group("agent_run");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(RUN_STEPS));
    for threads in [1, 16] {
        bench_system(&mut group, "by_hand", threads, AgentRuns::by_hand);
        bench_system(&mut group, "runtime", threads, AgentRuns::runtime);
    }
    group.finish();
}

fn checkpoint_save(c: &mut Criterion) {
    let mut group = c.benchmark_group("checkpoint_save");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(1));
    let mut run: Option<CheckpointRun> = None;
    group.bench_function("1MiB_one_part_changed", |b| {
        let run = run.get_or_insert_with(CheckpointRun::new);
        b.iter_custom(|saves| {
            let start = Instant::now();
            for _ in 0..saves {
                run.save();
            }
            start.elapsed()
        });
    });
    if let Some(run) = run.take() {
        eprintln!("checkpoint_save/1MiB_one_part_changed: {}", run.summary());
    }
    settle_scratch();
    group.finish();
}

fn point_reads(c: &mut Criterion) {
    let mut group = c.benchmark_group("point_read");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(1));
    let setup = ProtocolEngine::new(1);
    let key = setup.protocol(0, 0);
    let (run, guard) = setup.runs()[0].clone();
    setup
        .engine
        .save_checkpoint(SaveCheckpoint {
            run: run.clone(),
            guard,
            schema_version: SCHEMA_VERSION,
            parts: initial_state(STEP_STATE_PARTS, STEP_PART_BYTES, 0),
        })
        .expect("saving the checkpoint to read");
    let engine = &setup.engine;
    let read_effect = || {
        let entry = engine.effect(&key).expect("effect read");
        assert!(entry.is_some_and(|e| e.status.name() == "confirmed"));
    };
    let read_latest = || {
        let loaded = engine
            .load_latest(&run, SCHEMA_VERSION)
            .expect("load_latest")
            .expect("the run has a checkpoint");
        assert_eq!(loaded.parts.len(), STEP_STATE_PARTS);
    };
    group.bench_function("effect/hot", |b| b.iter(read_effect));
    group.bench_function("load_latest/hot", |b| b.iter(read_latest));
    // Settled entries and stored blobs leave memory at a checkpoint: read them from redb.
    engine.checkpoint().expect("checkpoint");
    group.bench_function("effect/checkpointed", |b| b.iter(read_effect));
    group.bench_function("load_latest/checkpointed", |b| b.iter(read_latest));
    group.finish();
    drop(setup);
    settle_scratch();
}

criterion::criterion_group!(
    benches,
    agent_steps,
    agent_runs,
    checkpoint_save,
    point_reads
);
criterion::criterion_main!(benches);
