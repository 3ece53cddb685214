//! The effect protocol as the benches run it: one leased run per thread,
//! and per protocol a fresh step's durable intent (`begin_effect`) then its
//! durable outcome (`finish_effect`): two engine commits.
//!
//! **Invariant:** every protocol is a fresh step, so every `begin_effect`
//! answers `Proceed` and writes an intent (the bench asserts it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use actum::books::{
    BeginEffect, CreateRun, FinishEffect, Guard, LEASE_TTL_MS_MAX, Outcome, RunId, StepId,
    ToolClass, WorkerId, digest_of,
};
use actum::engine::{Begun, Engine, EngineOptions};

/// An engine with one leased run per thread.
pub struct ProtocolEngine {
    _dir: tempfile::TempDir,
    /// The engine.
    pub engine: Engine,
    guards: Vec<(RunId, Guard)>,
    next_step: AtomicU64,
}

impl ProtocolEngine {
    /// A fresh engine in a scratch directory, with `threads` leased runs.
    pub fn new(threads: usize) -> ProtocolEngine {
        ProtocolEngine::with_options(threads, EngineOptions::default())
    }

    /// Like [`ProtocolEngine::new`], with `options`.
    pub fn with_options(threads: usize, options: EngineOptions) -> ProtocolEngine {
        let dir = crate::scratch_dir();
        let engine = Engine::open(dir.path(), options).expect("open engine");
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
        ProtocolEngine {
            _dir: dir,
            engine,
            guards,
            next_step: AtomicU64::new(0),
        }
    }

    /// One protocol on thread `t`'s run: durable intent, durable outcome.
    pub fn protocol(&self, t: usize) {
        let (run, guard) = &self.guards[t];
        let n = self.next_step.fetch_add(1, Ordering::Relaxed);
        let step = StepId::new(format!("s{n}")).expect("step id");
        let begun = self
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
        self.engine
            .finish_effect(FinishEffect {
                key,
                guard: guard.clone(),
                outcome: Outcome::Confirmed {
                    receipt: b"ch_0123456789".to_vec(),
                },
            })
            .expect("finish");
    }
}

/// Runs `count` calls of `one(thread)` spread over `threads` threads;
/// returns the time from the first start to the last finish.
pub fn spread(threads: usize, count: u64, one: &(dyn Fn(usize) + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let share = count / threads as u64 + u64::from((t as u64) < count % threads as u64);
            scope.spawn(move || (0..share).for_each(|_| one(t)));
        }
    });
    start.elapsed()
}

/// Runs `protocols` protocols over `threads` threads.
pub fn run_protocols(setup: &ProtocolEngine, threads: usize, protocols: u64) -> Duration {
    spread(threads, protocols, &|t| setup.protocol(t))
}
