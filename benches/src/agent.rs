//! A full agent step and a large checkpoint save, as the `agent_step` bench runs them.
//!
//! An agent's state is a list of equal-sized parts (its "messages"); a step changes exactly one
//! part, so a checkpoint save stores that part's bytes and the metadata naming every part, and
//! reuses the others by digest. [`StepEngine`] runs, per writer thread, a leased run whose step
//! is: the effect intent, a simulated act (no I/O), the outcome, and `save_checkpoint` of the
//! state with one part changed; [`CheckpointRun`] saves one run's large state over and over with
//! one part changed. Both sit on a [`CountingStorage`], so bytes written per save are measured.
//!
//! **Invariant:** every save changes exactly one part, to bytes never saved before (derived
//! from a ticket unique to the save), so each save writes one new blob (asserted).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use actum::Engine;
use actum::books::{Command, Guard, Outcome, Part, RunId, SaveCheckpoint, ToolClass, digest_of};
use actum::engine::{
    EffectCtx, EngineOptions, SavedCheckpoint, StepPlan, StepRequest, StepResult, ToolSpec,
};
use actum::wal::WalStats;

use crate::DurableLog;
use crate::counting::{CountingStorage, WriteCounts, WriteTotals};
use crate::protocol::{DEDUP_WINDOW_MS, ProtocolEngine, step_id, wal_summary_since};

/// Parts of an agent step's state.
pub const STEP_STATE_PARTS: usize = 10;
/// Bytes of one part of an agent step's state: 10 parts of 1 KiB make the 10 KiB state.
pub const STEP_PART_BYTES: usize = 1024;
/// Parts of the large state a checkpoint save bench saves ("messages").
pub const LARGE_STATE_PARTS: usize = 256;
/// Bytes of one part of the large state: 256 parts of 4 KiB make 1 MiB.
pub const LARGE_PART_BYTES: usize = 4096;
/// The schema version every bench checkpoint is saved under.
pub const SCHEMA_VERSION: u32 = 1;

const _: () = assert!(STEP_STATE_PARTS * STEP_PART_BYTES == 10 << 10);
const _: () = assert!(LARGE_STATE_PARTS * LARGE_PART_BYTES == 1 << 20);

/// `bytes` bytes derived from `seed`, so two seeds give different parts.
pub fn part_bytes(seed: u64, bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 8);
    let mut word = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < bytes {
        // xorshift64: cheap, and never zero for a non-zero start.
        word ^= word << 13;
        word ^= word >> 7;
        word ^= word << 17;
        out.extend_from_slice(&word.to_le_bytes());
    }
    out.truncate(bytes);
    out
}

/// A state of `parts` parts of `part_bytes` bytes, named `message-000`, ...; `salt` keeps
/// different states' parts apart.
pub fn initial_state(parts: usize, part_bytes_each: usize, salt: u64) -> Vec<Part> {
    (0..parts)
        .map(|i| Part {
            name: format!("message-{i:03}"),
            bytes: part_bytes(
                salt.wrapping_mul(1 << 20).wrapping_add(i as u64),
                part_bytes_each,
            ),
            extends: None,
            inline: false,
        })
        .collect()
}

/// Replaces part `ticket % parts.len()` with bytes derived from `ticket` (and `salt`).
pub fn change_one_part(parts: &mut [Part], ticket: u64, salt: u64) {
    assert!(!parts.is_empty(), "a state has parts");
    let index = usize::try_from(ticket % parts.len() as u64).expect("an index fits in usize");
    let len = parts[index].bytes.len();
    // Seeds of changed parts live above those of initial parts (salt << 20 + index).
    let seed = (1u64 << 62) ^ salt.wrapping_mul(0x1_0000_0001) ^ ticket;
    parts[index].bytes = part_bytes(seed, len);
}

/// Saves `parts` as the next checkpoint of `run`, checking that exactly one part was new.
fn save_one_changed(
    engine: &Engine,
    run: &RunId,
    guard: &Guard,
    parts: &[Part],
) -> SavedCheckpoint {
    let saved = engine
        .save_checkpoint(SaveCheckpoint {
            run: run.clone(),
            guard: guard.clone(),
            schema_version: SCHEMA_VERSION,
            parts: parts.to_vec(),
        })
        .expect("save_checkpoint");
    assert_eq!(
        (saved.blobs_written, saved.blobs_reused),
        (1, parts.len() - 1),
        "exactly one part changed"
    );
    saved
}

/// The engine of the step benches, with bytes written counted.
pub struct CountedEngine {
    /// The engine and its leased runs.
    pub setup: ProtocolEngine,
    /// Bytes written through the engine's storage.
    pub counts: Arc<WriteCounts>,
}

impl CountedEngine {
    /// A fresh engine on a [`CountingStorage`] with `runs` leased runs.
    pub fn new(runs: usize) -> CountedEngine {
        let storage = CountingStorage::new();
        let counts = storage.counts();
        let setup = ProtocolEngine::with_storage(runs, Arc::new(storage), EngineOptions::default());
        CountedEngine { setup, counts }
    }

    /// Runs a checkpoint, so what was logged is written to the state store and counted.
    pub fn checkpoint(&self) {
        self.setup.engine.checkpoint().expect("checkpoint");
    }
}

/// One run's agent state for the step bench.
pub struct AgentState {
    /// The state's parts, as last saved.
    parts: Vec<Part>,
}

/// An engine whose writer threads each run agent steps on their own leased run.
pub struct StepEngine {
    engine: CountedEngine,
    states: Vec<Mutex<AgentState>>,
    next_writer: AtomicUsize,
    /// Writes since setup (the initial saves excluded), for the per-step summary.
    counted_from: WriteTotals,
    /// The WAL's counters after setup, for commits per fsync.
    stats_from: WalStats,
    steps: AtomicU64,
    /// Put the outcome and the checkpoint in one commit (`finish_step_with`) instead of two.
    batched: bool,
}

impl StepEngine {
    /// `runs` leased runs, each with a first checkpoint of its 10 KiB state saved. With
    /// `batched`, a step's outcome and checkpoint are one atomic commit.
    pub fn new(runs: usize, batched: bool) -> StepEngine {
        let engine = CountedEngine::new(runs);
        let states = engine
            .setup
            .runs()
            .iter()
            .enumerate()
            .map(|(t, (run, guard))| {
                let parts = initial_state(STEP_STATE_PARTS, STEP_PART_BYTES, t as u64);
                engine
                    .setup
                    .engine
                    .save_checkpoint(SaveCheckpoint {
                        run: run.clone(),
                        guard: guard.clone(),
                        schema_version: SCHEMA_VERSION,
                        parts: parts.clone(),
                    })
                    .expect("first checkpoint");
                Mutex::new(AgentState { parts })
            })
            .collect();
        engine.checkpoint();
        let counted_from = engine.counts.totals();
        let stats_from = engine.setup.engine.wal_stats();
        StepEngine {
            engine,
            states,
            next_writer: AtomicUsize::new(0),
            counted_from,
            stats_from,
            steps: AtomicU64::new(0),
            batched,
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine.setup.engine
    }

    /// One step on run `t` (number `ticket`): intent, act, outcome, checkpoint.
    fn step(&self, t: usize, state: &mut AgentState, ticket: u64) {
        let (run, guard) = &self.engine.setup.runs()[t];
        let step = step_id(ticket);
        let args = ticket.to_le_bytes();
        let request = StepRequest {
            guard,
            run,
            step: &step,
            tool: ToolSpec {
                name: "search.web".into(),
                class: ToolClass::Idempotent {
                    dedup_window_ms: DEDUP_WINDOW_MS,
                },
            },
            args: &args,
            rationale: "the plan needs the next fact",
            compensation: None,
        };
        change_one_part(&mut state.parts, ticket, t as u64);
        if self.batched {
            self.step_batched(&request, state);
        } else {
            let result = self
                .engine()
                .step(&request, simulated_act)
                .expect("agent step");
            assert!(matches!(
                result,
                StepResult::Done {
                    replayed: false,
                    ..
                }
            ));
            save_one_changed(self.engine(), run, guard, &state.parts);
        }
        self.steps.fetch_add(1, Ordering::Relaxed);
    }

    /// The step with its outcome and checkpoint committed together.
    fn step_batched(&self, request: &StepRequest<'_>, state: &AgentState) {
        let plan = self.engine().begin_step(request).expect("begin_step");
        let StepPlan::Act(ctx) = plan else {
            panic!("a fresh step did not plan an act: {plan:?}")
        };
        let outcome = simulated_act(&ctx);
        let save = Command::SaveCheckpoint(SaveCheckpoint {
            run: request.run.clone(),
            guard: request.guard.clone(),
            schema_version: SCHEMA_VERSION,
            parts: state.parts.clone(),
        });
        let finished = self
            .engine()
            .finish_step_with(request.guard, &ctx, outcome, vec![save])
            .expect("outcome and checkpoint in one commit");
        let saved = finished.then.expect("the checkpoint is accepted");
        assert_eq!(saved.len(), 1);
    }
}

/// The act of a step: no I/O, a receipt derived from the key (what a tool would return).
fn simulated_act(ctx: &EffectCtx) -> Outcome {
    let digest = digest_of(ctx.key.encode().as_bytes());
    Outcome::Confirmed {
        receipt: digest.short().into_bytes(),
    }
}

impl DurableLog for StepEngine {
    type Writer<'a> = (usize, MutexGuard<'a, AgentState>);

    fn writer(&self) -> Self::Writer<'_> {
        let t = self.next_writer.fetch_add(1, Ordering::Relaxed) % self.states.len();
        let state = self.states[t]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (t, state)
    }

    fn summary(&self) -> Option<String> {
        // Write what was logged to the state store, so the count covers every step's bytes.
        self.engine.checkpoint();
        let steps = self.steps.load(Ordering::Relaxed);
        let written = self.engine.counts.totals().since(self.counted_from);
        Some(format!(
            "{}; {steps} steps: {} (the changed part is {STEP_PART_BYTES} bytes)",
            wal_summary_since(self.engine(), self.stats_from),
            written.per(steps, "step")
        ))
    }

    fn commit(&self, writer: &mut Self::Writer<'_>, ticket: u64) {
        let (t, state) = writer;
        self.step(*t, state, ticket);
    }
}

/// One leased run whose 1 MiB state is saved again and again with one part changed.
pub struct CheckpointRun {
    engine: CountedEngine,
    parts: Vec<Part>,
    saves: u64,
    counted_from: WriteTotals,
}

impl CheckpointRun {
    /// A leased run with its first checkpoint (all of the 1 MiB) saved and written to the
    /// state store.
    pub fn new() -> CheckpointRun {
        let engine = CountedEngine::new(1);
        let parts = initial_state(LARGE_STATE_PARTS, LARGE_PART_BYTES, 0);
        let (run, guard) = &engine.setup.runs()[0];
        engine
            .setup
            .engine
            .save_checkpoint(SaveCheckpoint {
                run: run.clone(),
                guard: guard.clone(),
                schema_version: SCHEMA_VERSION,
                parts: parts.clone(),
            })
            .expect("first checkpoint of the large state");
        engine.checkpoint();
        let counted_from = engine.counts.totals();
        CheckpointRun {
            engine,
            parts,
            saves: 0,
            counted_from,
        }
    }

    /// Saves the state with one more part changed.
    pub fn save(&mut self) {
        self.saves += 1;
        change_one_part(&mut self.parts, self.saves, 0);
        let (run, guard) = &self.engine.setup.runs()[0];
        let saved = save_one_changed(&self.engine.setup.engine, run, guard, &self.parts);
        assert_eq!(saved.bytes_written, LARGE_PART_BYTES as u64);
    }

    /// Bytes written per save so far, after a checkpoint writes the saves to the state store.
    pub fn summary(&self) -> String {
        self.engine.checkpoint();
        let written = self.engine.counts.totals().since(self.counted_from);
        format!(
            "{} saves of a {} KiB state: {} (the changed part is {LARGE_PART_BYTES} bytes)",
            self.saves,
            (LARGE_STATE_PARTS * LARGE_PART_BYTES) >> 10,
            written.per(self.saves, "save")
        )
    }
}

impl Default for CheckpointRun {
    fn default() -> Self {
        CheckpointRun::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::run_writers;

    #[test]
    fn changing_a_part_changes_only_that_part_and_never_repeats_bytes() {
        let mut parts = initial_state(4, 64, 1);
        let before = parts.clone();
        change_one_part(&mut parts, 6, 1);
        let changed: Vec<usize> = (0..4).filter(|&i| parts[i] != before[i]).collect();
        assert_eq!(changed, vec![2]);
        let mut again = before.clone();
        change_one_part(&mut again, 10, 1);
        assert_ne!(again[2], parts[2]);
        assert_ne!(initial_state(4, 64, 2), before);
    }

    #[test]
    fn steps_save_one_new_part_each() {
        for batched in [false, true] {
            let engine = StepEngine::new(3, batched);
            run_writers(&engine, 3, 0, 12);
            assert_eq!(engine.steps.load(Ordering::Relaxed), 12);
            let summary = engine.summary().expect("a summary");
            assert!(summary.contains("12 steps"), "{summary}");
        }
    }

    #[test]
    fn a_large_save_writes_about_the_change() {
        let mut run = CheckpointRun::new();
        for _ in 0..5 {
            run.save();
        }
        let written = run.engine.counts.totals().since(run.counted_from);
        assert!(written.log_bytes >= 5 * LARGE_PART_BYTES as u64);
        assert!(run.summary().starts_with("5 saves of a 1024 KiB state"));
    }
}
