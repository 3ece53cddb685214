//! The full effect protocol per second: `begin_effect` (the durable intent)
//! then `finish_effect` (the durable outcome), with 1 and 64 threads, next
//! to redb doing the same two writes as two `Durability::Immediate`
//! transactions. One criterion iteration is one whole protocol (two durable
//! writes); `iter_custom` spreads a sample's protocols over the threads and
//! times the first start to the last finish.
//!
//! Run: `cargo bench -p actum-benches --bench effect_protocol`
//! (docs/PERFORMANCE.md, "Effect protocol", has the figures).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actum::books::{
    BeginEffect, CreateRun, FinishEffect, Guard, LEASE_TTL_MS_MAX, Outcome, RunId, StepId,
    ToolClass, WorkerId, digest_of,
};
use actum::engine::{Begun, Engine, EngineOptions};
use criterion::{BenchmarkId, Criterion, Throughput};
use redb::{Durability, TableDefinition};

const THREAD_COUNTS: [usize; 2] = [1, 64];
const LEDGER: TableDefinition<u64, &[u8]> = TableDefinition::new("ledger");

/// An engine with one leased run per thread.
struct ActumSetup {
    _dir: tempfile::TempDir,
    engine: Engine,
    guards: Vec<(RunId, Guard)>,
    next_step: AtomicU64,
}

fn actum_setup(threads: usize) -> ActumSetup {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Engine::open(dir.path(), EngineOptions::default()).expect("open engine");
    let guards = (0..threads)
        .map(|t| {
            let run = RunId::new(format!("bench-{t}")).expect("run id");
            engine
                .create_run(CreateRun {
                    run: run.clone(),
                    input_digest: digest_of(b"bench"),
                    agent_version: "bench".into(),
                    trace_id: String::new(),
                    parent: None,
                })
                .expect("create run");
            let worker = WorkerId::new(format!("w{t}")).expect("worker id");
            let grant = engine
                .acquire_lease(&run, &worker, LEASE_TTL_MS_MAX)
                .expect("lease");
            (run, grant.guard)
        })
        .collect();
    ActumSetup {
        _dir: dir,
        engine,
        guards,
        next_step: AtomicU64::new(0),
    }
}

/// One protocol: durable intent, then durable outcome.
fn actum_protocol(setup: &ActumSetup, run: &RunId, guard: &Guard) {
    let n = setup.next_step.fetch_add(1, Ordering::Relaxed);
    let step = StepId::new(format!("s{n}")).expect("step id");
    let begun = setup
        .engine
        .begin_effect(BeginEffect {
            run: run.clone(),
            step,
            guard: guard.clone(),
            tool: "stripe.charge".into(),
            tool_class: ToolClass::Idempotent {
                dedup_window_ms: 86_400_000,
            },
            args_digest: digest_of(&n.to_le_bytes()),
            rationale: "benchmark".into(),
            compensation: None,
        })
        .expect("begin");
    let Begun::Proceed { key, .. } = begun else {
        panic!("fresh step did not proceed: {begun:?}")
    };
    setup
        .engine
        .finish_effect(FinishEffect {
            key,
            guard: guard.clone(),
            outcome: Outcome::Confirmed {
                receipt: b"ch_0123456789".to_vec(),
            },
        })
        .expect("finish");
}

/// Runs `protocols` over `threads` threads calling `one(thread)`.
fn spread(threads: usize, protocols: u64, one: &(dyn Fn(usize) + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let share =
                protocols / threads as u64 + u64::from((t as u64) < protocols % threads as u64);
            scope.spawn(move || (0..share).for_each(|_| one(t)));
        }
    });
    start.elapsed()
}

fn redb_setup() -> (tempfile::TempDir, Arc<redb::Database>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = redb::Database::create(dir.path().join("ledger.redb")).expect("redb");
    (dir, Arc::new(db))
}

/// The same two writes as two durable redb transactions.
fn redb_protocol(db: &redb::Database, key: u64) {
    for value in [
        &b"intent: stripe.charge args 32 bytes of digest, rationale"[..],
        b"confirmed ch_0123456789",
    ] {
        let mut txn = db.begin_write().expect("begin");
        txn.set_durability(Durability::Immediate)
            .expect("durability");
        txn.open_table(LEDGER)
            .expect("table")
            .insert(key, value)
            .expect("insert");
        txn.commit().expect("commit");
    }
}

fn effect_protocol(c: &mut Criterion) {
    let mut group = c.benchmark_group("effect_protocol");
    group
        .throughput(Throughput::Elements(1))
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for threads in THREAD_COUNTS {
        let setup = actum_setup(threads);
        group.bench_with_input(
            BenchmarkId::new("actum", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|n| {
                    spread(threads, n, &|t| {
                        let (run, guard) = &setup.guards[t];
                        actum_protocol(&setup, run, guard);
                    })
                });
            },
        );
        drop(setup);
        let (_dir, db) = redb_setup();
        let next = AtomicU64::new(0);
        group.bench_with_input(
            BenchmarkId::new("redb", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|n| {
                    spread(threads, n, &|_| {
                        redb_protocol(&db, next.fetch_add(1, Ordering::Relaxed));
                    })
                });
            },
        );
    }
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    effect_protocol(&mut criterion);
    criterion.final_summary();
}
