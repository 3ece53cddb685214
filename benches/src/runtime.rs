//! Whole agent runs through the runtime and by hand, as the `agent_step` bench's `agent_run`
//! group runs them: the runtime's cost is what it adds to the same engine commits.
//!
//! One commit of the bench ([`DurableLog::commit`]) is one run of [`RUN_STEPS`] steps. Each
//! step changes the agent's 1 KiB state and calls a tool (no I/O); the state is checkpointed in
//! the commit of the step's outcome. Both sides make exactly the same durable commits: the
//! run's creation with its input, its claim, its start, per step the intent and the outcome
//! with the checkpoint, and the output with the move to completed. [`AgentRuns::by_hand`] makes
//! them with the engine's calls, as a worker loop written for the purpose would;
//! [`AgentRuns::runtime`] registers the same agent as a handler and lets
//! [`Runtime::work_once`] claim and drive it, so what differs is the runtime's own work (the
//! journal read and checks, lease upkeep, the handler's dispatch).
//!
//! **Invariant:** every run completes with every step acted once (asserted), on both sides.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use actum::books::{
    Command, CreateRun, Outcome, Part, RunId, RunState, SaveCheckpoint, StepId, ToolClass,
    Transition, WorkerId, digest_of,
};
use actum::engine::{EngineOptions, StepPlan, StepRequest, StepResult, ToolSpec};
use actum::runtime::{Driven, OUTPUT_PART, RUNTIME_SCHEMA, Runtime, STATE_PART, Tool};
use actum::{Engine, SystemClock};

use crate::DurableLog;
use crate::agent::part_bytes;
use crate::protocol::wal_summary_since;

/// Steps of one bench run.
pub const RUN_STEPS: u64 = 8;
/// Bytes of the agent's state, checkpointed at every step.
pub const STATE_BYTES: usize = 1024;
const LEASE_MS: u64 = 600_000;
const KIND: &str = "bench";

fn tool() -> ToolSpec {
    ToolSpec {
        name: "search.web".into(),
        class: ToolClass::Idempotent {
            dedup_window_ms: 86_400_000,
        },
    }
}

fn receipt(key: &str) -> Outcome {
    Outcome::Confirmed {
        receipt: digest_of(key.as_bytes()).short().into_bytes(),
    }
}

fn state_of(run: u64, step: u64) -> Vec<u8> {
    part_bytes(run.wrapping_mul(1 << 16).wrapping_add(step), STATE_BYTES)
}

/// Agent runs on a fresh engine, through the runtime or by hand.
pub struct AgentRuns {
    runtime: Option<Runtime>,
    engine: Arc<Engine>,
    acts: Arc<AtomicU64>,
    runs: AtomicU64,
    next_worker: AtomicU64,
    stats_from: actum::wal::WalStats,
    _dir: tempfile::TempDir,
}

impl AgentRuns {
    fn open() -> (Arc<Engine>, tempfile::TempDir) {
        let dir = crate::scratch_dir();
        let engine = Engine::open_with(
            Arc::new(actum::FsStorage::new()),
            Arc::new(SystemClock),
            dir.path(),
            EngineOptions::default(),
        )
        .expect("opening the bench engine");
        (Arc::new(engine), dir)
    }

    fn with(
        runtime: Option<Runtime>,
        engine: Arc<Engine>,
        acts: Arc<AtomicU64>,
        dir: tempfile::TempDir,
    ) -> AgentRuns {
        let stats_from = engine.wal_stats();
        AgentRuns {
            runtime,
            engine,
            acts,
            runs: AtomicU64::new(0),
            next_worker: AtomicU64::new(0),
            stats_from,
            _dir: dir,
        }
    }

    /// Runs driven by hand, with the engine's calls.
    pub fn by_hand() -> AgentRuns {
        let (engine, dir) = AgentRuns::open();
        AgentRuns::with(None, engine, Arc::default(), dir)
    }

    /// Runs driven by a runtime serving the same agent as a handler.
    pub fn runtime() -> AgentRuns {
        let (engine, dir) = AgentRuns::open();
        let options = actum::runtime::RuntimeOptions {
            lease_ttl_ms: LEASE_MS,
            ..Default::default()
        };
        let runtime = Runtime::with_options(engine.clone(), options);
        let acts = Arc::new(AtomicU64::new(0));
        let counted = acts.clone();
        runtime
            .register(KIND, "1", move |ctx| {
                let spec = tool();
                let tool = Tool::new(spec.name, spec.class);
                let run =
                    u64::from_le_bytes(ctx.input().try_into().map_err(|_| "an 8-byte input")?);
                for step in 0..RUN_STEPS {
                    ctx.checkpoint(&state_of(run, step))?;
                    ctx.step(&format!("s{step}"), &tool, &step.to_le_bytes(), |call| {
                        counted.fetch_add(1, Ordering::Relaxed);
                        receipt(&call.key.encode())
                    })?;
                }
                Ok(b"done".to_vec())
            })
            .expect("registering the bench agent");
        AgentRuns::with(Some(runtime), engine, acts, dir)
    }

    fn run_by_hand(&self, worker: &WorkerId, ticket: u64) {
        let engine = &self.engine;
        let input = ticket.to_le_bytes();
        let run = RunId::new(format!("run-{ticket}")).expect("a bench run id");
        engine
            .create_run(CreateRun {
                run: run.clone(),
                input_digest: digest_of(&input),
                agent_version: format!("{KIND}@1"),
                trace_id: run.as_str().to_string(),
                parent: None,
                input: Some(input.to_vec()),
            })
            .expect("create");
        let grant = engine
            .claim_next(worker, LEASE_MS)
            .expect("claim")
            .expect("a run to claim");
        let (run, guard) = (grant.run, grant.guard);
        engine
            .transition(Transition {
                run: run.clone(),
                guard: guard.clone(),
                to: RunState::Running,
                expected_version: None,
                reason: "start".into(),
            })
            .expect("start");
        let n = u64::from_le_bytes(
            engine
                .run_input(&run)
                .expect("input")
                .expect("stored")
                .try_into()
                .expect("8 bytes"),
        );
        let save = |part: &str, bytes: Vec<u8>| {
            Command::SaveCheckpoint(SaveCheckpoint {
                run: run.clone(),
                guard: guard.clone(),
                schema_version: RUNTIME_SCHEMA,
                parts: vec![Part {
                    name: part.into(),
                    bytes,
                    extends: None,
                    inline: false,
                }],
            })
        };
        for step in 0..RUN_STEPS {
            let step_id = StepId::new(format!("s{step}")).expect("a step id");
            let args = step.to_le_bytes();
            let request = StepRequest {
                guard: &guard,
                run: &run,
                step: &step_id,
                tool: tool(),
                args: &args,
                rationale: "the plan needs the next fact",
                compensation: None,
            };
            let StepPlan::Act(ctx) = engine.begin_step(&request).expect("begin") else {
                panic!("a fresh step plans an act")
            };
            self.acts.fetch_add(1, Ordering::Relaxed);
            let outcome = receipt(&ctx.key.encode());
            let finished = engine
                .finish_step_with(
                    &guard,
                    &ctx,
                    outcome,
                    vec![save(STATE_PART, state_of(n, step))],
                )
                .expect("finish");
            assert!(matches!(finished.result, StepResult::Done { .. }));
            finished.then.expect("the checkpoint is accepted");
        }
        engine
            .commit_batch(vec![
                save(OUTPUT_PART, b"done".to_vec()),
                Command::Transition(Transition {
                    run: run.clone(),
                    guard: guard.clone(),
                    to: RunState::Completed,
                    expected_version: None,
                    reason: "returned".into(),
                }),
            ])
            .expect("complete");
    }

    fn run_on_runtime(&self, runtime: &Runtime, worker: &WorkerId, ticket: u64) {
        runtime
            .start(KIND, &format!("run-{ticket}"), &ticket.to_le_bytes())
            .expect("start");
        let (_, driven) = runtime
            .work_once(worker)
            .expect("work")
            .expect("a run to claim");
        assert_eq!(driven, Driven::Completed);
    }
}

impl DurableLog for AgentRuns {
    type Writer<'a> = WorkerId;

    fn writer(&self) -> WorkerId {
        let n = self.next_worker.fetch_add(1, Ordering::Relaxed);
        WorkerId::new(format!("w{n}")).expect("a worker id")
    }

    fn summary(&self) -> Option<String> {
        let runs = self.runs.load(Ordering::Relaxed);
        let acts = self.acts.load(Ordering::Relaxed);
        assert_eq!(acts, runs * RUN_STEPS, "every step acted once");
        Some(format!(
            "{}; {runs} runs of {RUN_STEPS} steps, {acts} acts",
            wal_summary_since(&self.engine, self.stats_from)
        ))
    }

    fn commit(&self, worker: &mut WorkerId, ticket: u64) {
        match &self.runtime {
            Some(runtime) => self.run_on_runtime(runtime, worker, ticket),
            None => self.run_by_hand(worker, ticket),
        }
        self.runs.fetch_add(1, Ordering::Relaxed);
    }
}
