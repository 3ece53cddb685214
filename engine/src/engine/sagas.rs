//! Sagas at the engine's door: what a compensating run does next
//! ([`Engine::saga_next`]), its end ([`Engine::end_saga`]), and the whole
//! saga in one call ([`Engine::run_saga`]) for a worker that holds the
//! run's lease. A run becomes compensating when it fails or is cancelled
//! after acts that registered a compensation (`books/rules/saga.rs`); each
//! compensation is the ceremony of [`Engine::compensate`], so it happens
//! once across crashes, and a worker that dies mid-saga leaves the run
//! claimable: the next worker asks `saga_next` and goes on.
//!
//! **Invariant:** a saga undoes steps last first, and the run reaches its
//! end only through `end_saga` (refused while anything is outstanding) or
//! an operator's `Abandon`.

use crate::books::{
    Command, Compensation, EndSaga, Guard, RunId, RunState, SagaBook, SagaNext, StepId,
};
use crate::error::{Error, Result};

use super::compensate::CompensationRequest;
use super::core::Engine;
use super::step::{EffectCtx, StepResult, ToolOutcome};

/// Where [`Engine::run_saga`] left a saga.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SagaProgress {
    /// Every compensation is done and the run reached its end.
    Ended {
        /// Failed or cancelled.
        state: RunState,
        /// The steps this call undid, in the order it undid them.
        undone: Vec<StepId>,
    },
    /// A compensation did not confirm this time (it failed and may be
    /// retried, or its outcome is unknown and the tool's class resolves it
    /// at the next call): call again later.
    Pending {
        /// The step.
        step: StepId,
        /// What its compensation came to.
        result: StepResult,
        /// The steps this call undid before it.
        undone: Vec<StepId>,
    },
    /// The saga cannot go on by itself (`SagaNext::Resolve` or
    /// `SagaNext::Stuck`): resolve the act, or have a person settle it.
    Blocked {
        /// What blocks it.
        next: SagaNext,
        /// The steps this call undid before it.
        undone: Vec<StepId>,
    },
}

impl Engine {
    /// The saga book of `run`: the steps whose act registered a
    /// compensation, in intent order, and, once it compensates, its end.
    /// An empty book if none did; `NotFound` if there is no such run.
    ///
    /// ```
    /// use actum::books::{Compensation, Outcome, RunState, StepId, ToolClass, Transition};
    /// use actum::engine::{Engine, EngineOptions, StepRequest, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("trip-5")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"5"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let class = ToolClass::Queryable;
    /// for (step, undo) in [("seat", Some("seat.release")), ("note", None), ("card", Some("card.refund"))] {
    ///     let compensation = undo.map(|tool| Compensation { tool: tool.into(), args: vec![], class });
    ///     engine.step(&StepRequest { guard: &lease.guard, run: &run, step: &StepId::new(step)?,
    ///         tool: ToolSpec { name: step.into(), class }, args: b"", rationale: "book", compensation },
    ///         |_| Outcome::Confirmed { receipt: vec![] })?;
    /// }
    /// // Only the steps that registered a compensation, in the order they acted.
    /// let book = engine.saga(&run)?;
    /// assert_eq!((book.steps, book.end), (vec![StepId::new("seat")?, StepId::new("card")?], None));
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Failed, expected_version: None, reason: "no visa".into() })?;
    /// assert_eq!(engine.saga(&run)?.end, Some(RunState::Failed), "where it ends once undone");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn saga(&self, run: &RunId) -> Result<SagaBook> {
        self.read(|books| {
            crate::books::existing(books, run)?;
            Ok(books
                .saga(run)
                .unwrap_or_else(|| SagaBook::new(run.clone())))
        })
    }

    /// What `run`'s saga does next, by the engine's clock: undo a step,
    /// resolve an act in flight, wait for a person, or end. Meaningful for
    /// a compensating run; `NotFound` if there is no such run.
    ///
    /// ```
    /// use actum::books::{Compensation, Outcome, RunState, SagaNext, StepId, ToolClass, Transition};
    /// use actum::engine::{CompensationRequest, Engine, EngineOptions, StepRequest, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("trip-6")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"6"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let (seat, card) = (StepId::new("seat")?, StepId::new("card")?);
    /// let class = ToolClass::Queryable;
    /// for step in [&seat, &card] {
    ///     let compensation = Some(Compensation { tool: "undo".into(), args: vec![], class });
    ///     engine.step(&StepRequest { guard: &lease.guard, run: &run, step,
    ///         tool: ToolSpec { name: "do".into(), class }, args: b"", rationale: "book", compensation },
    ///         |_| Outcome::Confirmed { receipt: vec![] })?;
    /// }
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Failed, expected_version: None, reason: "no visa".into() })?;
    /// // Last first: the card is refunded before the seat is released.
    /// for step in [&card, &seat] {
    ///     assert_eq!(engine.saga_next(&run)?, SagaNext::Undo { step: step.clone() });
    ///     let request = CompensationRequest { guard: &lease.guard, run: &run, step, rationale: "" };
    ///     engine.compensate(&request, |_, _| Outcome::Confirmed { receipt: vec![] }, |_, _| unreachable!())?;
    /// }
    /// assert_eq!(engine.saga_next(&run)?, SagaNext::End { end: RunState::Failed });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn saga_next(&self, run: &RunId) -> Result<SagaNext> {
        let now_ms = self.clock.now_ms();
        let last_first = !self.planted(crate::planted::PlantedBug::UndoFirstStepFirst);
        self.read(|books| {
            crate::books::existing(books, run)?;
            Ok(crate::books::saga_next_walking(
                books, run, now_ms, last_first,
            ))
        })
    }

    /// Ends the saga of the compensating `run` under the caller's live
    /// lease: the run reaches the end its saga recorded (failed or
    /// cancelled) and drops its lease. `SagaOutstanding` while anything is
    /// left to undo or to learn.
    ///
    /// ```
    /// use actum::books::{Compensation, Outcome, RunState, StepId, ToolClass, Transition};
    /// use actum::engine::{CompensationRequest, Engine, EngineOptions, StepRequest, ToolSpec};
    /// use actum::Error;
    /// # use actum::books::{CreateRun, RunId, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("trip-7")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"7"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let seat = StepId::new("seat")?;
    /// let class = ToolClass::Queryable;
    /// let compensation = Some(Compensation { tool: "seat.release".into(), args: vec![], class });
    /// engine.step(&StepRequest { guard: &lease.guard, run: &run, step: &seat,
    ///     tool: ToolSpec { name: "seat.hold".into(), class }, args: b"", rationale: "", compensation },
    ///     |_| Outcome::Confirmed { receipt: vec![] })?;
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Cancelled, expected_version: None, reason: "user cancelled".into() })?;
    /// // The seat is still held: the saga may not end yet.
    /// let early = engine.end_saga(&run, &lease.guard, "give up");
    /// assert!(matches!(early, Err(Error::SagaOutstanding { .. })));
    /// let request = CompensationRequest { guard: &lease.guard, run: &run, step: &seat, rationale: "" };
    /// engine.compensate(&request, |_, _| Outcome::Confirmed { receipt: vec![] }, |_, _| unreachable!())?;
    /// assert_eq!(engine.end_saga(&run, &lease.guard, "released")?, RunState::Cancelled);
    /// assert!(engine.run(&run)?.expect("exists").lease.is_none(), "over, and its lease dropped");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn end_saga(&self, run: &RunId, guard: &Guard, reason: &str) -> Result<RunState> {
        let cmd = Command::EndSaga(EndSaga {
            run: run.clone(),
            guard: guard.clone(),
            reason: reason.to_string(),
        });
        match self.answer(cmd)? {
            crate::books::Answer::Transitioned { to, .. } => Ok(to),
            other => Err(Error::Inconsistent {
                what: format!("end_saga of run {run} answered {other:?}"),
            }),
        }
    }

    /// Runs the saga of the compensating `run`, under the caller's lease:
    /// undoes every outstanding step, last first, through
    /// [`Engine::compensate`] (`undo` calls the registered compensation,
    /// only after its intent is durable; `query` asks the undoing tool
    /// when an earlier attempt's outcome is unknown and the tool is
    /// queryable), then ends the run. Each step is tried once per call; a
    /// crash anywhere is resumed by calling it again (from this worker or
    /// the next one to claim the run).
    ///
    /// ```
    /// use actum::books::{Compensation, CreateRun, Outcome, RunId, RunState, StepId, ToolClass, Transition, WorkerId, digest_of};
    /// use actum::engine::{Engine, EngineOptions, SagaProgress, StepRequest, ToolSpec};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("eod-2026-11-24")?;
    /// engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"eod"),
    ///     agent_version: "treasury 1.1".into(), trace_id: "t-1".into(), parent: None, input: None })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 60_000)?;
    /// let start = Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() };
    /// engine.transition(start)?;
    /// let idempotent = ToolClass::Idempotent { dedup_window_ms: 86_400_000 };
    /// for (step, tool, undo) in [("sweep", "bank.sweep", "bank.unsweep"), ("fund", "bank.fund", "bank.defund")] {
    ///     let step = StepId::new(step)?;
    ///     engine.step(
    ///         &StepRequest { guard: &lease.guard, run: &run, step: &step,
    ///             tool: ToolSpec { name: tool.into(), class: idempotent },
    ///             args: b"usd 1m", rationale: "end of day",
    ///             compensation: Some(Compensation { tool: undo.into(), args: b"usd 1m back".to_vec(), class: idempotent }) },
    ///         |_| Outcome::Confirmed { receipt: b"ok".to_vec() },
    ///     )?;
    /// }
    /// // The hedge is refused: the run fails, and compensates first.
    /// let fail = Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Failed, expected_version: None, reason: "hedge refused".into() };
    /// // The move says where the run went: compensating, its end failed.
    /// assert_eq!(engine.transition(fail)?.to, RunState::Compensating);
    /// assert_eq!(engine.run(&run)?.map(|r| r.state), Some(RunState::Compensating));
    /// let mut calls = Vec::new();
    /// let progress = engine.run_saga(&lease.guard, &run, "hedge refused",
    ///     |ctx, c| { calls.push((ctx.key.encode(), c.tool.clone())); Outcome::Confirmed { receipt: b"back".to_vec() } },
    ///     |_, _| unreachable!("nothing is ambiguous"))?;
    /// assert!(matches!(progress, SagaProgress::Ended { state: RunState::Failed, .. }));
    /// // Last first, each once, under its own key.
    /// assert_eq!(calls, [
    ///     ("eod-2026-11-24/fund/undo/1".to_string(), "bank.defund".to_string()),
    ///     ("eod-2026-11-24/sweep/undo/1".to_string(), "bank.unsweep".to_string()),
    /// ]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run_saga(
        &self,
        guard: &Guard,
        run: &RunId,
        rationale: &str,
        mut undo: impl FnMut(&EffectCtx, &Compensation) -> ToolOutcome,
        mut query: impl FnMut(&EffectCtx, &Compensation) -> ToolOutcome,
    ) -> Result<SagaProgress> {
        let mut undone: Vec<StepId> = Vec::new();
        let steps_max = self.saga(run)?.steps.len() + 1;
        for _ in 0..steps_max {
            let step = match self.saga_next(run)? {
                SagaNext::Undo { step } => step,
                SagaNext::End { .. } => {
                    let state = self.end_saga(run, guard, rationale)?;
                    return Ok(SagaProgress::Ended { state, undone });
                }
                next => return Ok(SagaProgress::Blocked { next, undone }),
            };
            let request = CompensationRequest {
                guard,
                run,
                step: &step,
                rationale,
            };
            match self.compensate(&request, &mut undo, &mut query)? {
                StepResult::Done { .. } | StepResult::Compensated { .. } => undone.push(step),
                result => {
                    return Ok(SagaProgress::Pending {
                        step,
                        result,
                        undone,
                    });
                }
            }
        }
        Err(Error::Inconsistent {
            what: format!("the saga of run {run} did not end after undoing each step once"),
        })
    }
}
