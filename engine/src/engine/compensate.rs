//! Compensation (a saga step) as an effect: undoing a step's confirmed act
//! runs the compensation its intent registered, under its own derived key
//! (`run/step/undo/n`), intent first and outcome after, through the same
//! plan as an act. A crash anywhere in it resumes by the undoing tool's
//! class, so the compensation, too, happens exactly once (or surfaces as
//! `Unknown` on a tool that cannot say).
//!
//! **Invariant:** the undo closure runs only on [`StepPlan::Act`], with the
//! tool and arguments the books registered, never ones the caller supplies
//! after the fact.

use crate::books::{BeginCompensation, Command, Compensation, EffectKind, Guard, RunId, StepId};
use crate::error::{Error, Result};

use super::core::Engine;
use super::step::{EffectCtx, StepPlan, StepResult, ToolOutcome};

/// Which step's act to undo, under which lease, and why.
#[derive(Clone, Debug)]
pub struct CompensationRequest<'a> {
    /// The lease the compensation runs under.
    pub guard: &'a Guard,
    /// The run.
    pub run: &'a RunId,
    /// The step whose confirmed act is undone.
    pub step: &'a StepId,
    /// Why (journaled with the compensation's intent).
    pub rationale: &'a str,
}

impl CompensationRequest<'_> {
    /// The command [`Engine::begin_compensation`] executes for this request.
    pub fn command(&self) -> Command {
        Command::BeginCompensation(BeginCompensation {
            run: self.run.clone(),
            step: self.step.clone(),
            guard: self.guard.clone(),
            rationale: self.rationale.to_string(),
        })
    }
}

impl Engine {
    /// Begins undoing `request.step`'s confirmed act: the compensation's
    /// key, ledger check and durable intent. Returns the plan (its context
    /// carries the act's receipt, `act_receipt`, for the undo and for a
    /// query) and the compensation the act registered (the tool and
    /// arguments to call).
    /// Report the outcome with [`Engine::finish_step`] (or
    /// [`Engine::resolve_step`] after a query), as for an act.
    ///
    /// ```
    /// use actum::books::{Compensation, EffectKey, EffectStatus, Outcome, StepId, ToolClass};
    /// use actum::engine::{CompensationRequest, Engine, EngineOptions, StepPlan, StepRequest, ToolSpec};
    /// # use actum::books::{CreateRun, RunId, RunState, Transition, WorkerId, digest_of};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// # let run = RunId::new("trip-4")?;
    /// # engine.create_run(CreateRun { run: run.clone(), input_digest: digest_of(b"4"),
    /// #     agent_version: "1".into(), trace_id: "t".into(), parent: None, input: None })?;
    /// # let lease = engine.claim_next(&WorkerId::new("w1")?, 30_000)?.expect("pending");
    /// # engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    /// #     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let hotel = StepId::new("book-hotel")?;
    /// let undo = Compensation { tool: "hotel.cancel".into(), args: b"booking 77".to_vec(),
    ///     class: ToolClass::Queryable };
    /// engine.step(&StepRequest { guard: &lease.guard, run: &run, step: &hotel,
    ///     tool: ToolSpec { name: "hotel.book".into(), class: ToolClass::Queryable },
    ///     args: b"2 nights", rationale: "the user chose it", compensation: Some(undo.clone()) },
    ///     |_| Outcome::Confirmed { receipt: b"booking 77".to_vec() })?;
    /// let request = CompensationRequest { guard: &lease.guard, run: &run, step: &hotel,
    ///     rationale: "trip cancelled" };
    /// let (StepPlan::Act(ctx), registered) = engine.begin_compensation(&request)? else { panic!() };
    /// // The compensation the act registered, under its own key, its intent durable.
    /// assert_eq!((ctx.key.encode(), registered), ("trip-4/book-hotel/undo/1".to_string(), undo));
    /// assert!(engine.durable_lsn() >= ctx.intent_lsn);
    /// // With the act's receipt: what to cancel.
    /// assert_eq!(ctx.act_receipt.as_deref(), Some(&b"booking 77"[..]));
    /// engine.finish_step(&lease.guard, &ctx, Outcome::Confirmed { receipt: b"cx-1".to_vec() })?;
    /// let act = engine.effect(&EffectKey::new(run.clone(), hotel, 1)?)?.expect("booked");
    /// assert!(matches!(act.status, EffectStatus::Compensated { .. }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn begin_compensation(
        &self,
        request: &CompensationRequest<'_>,
    ) -> Result<(StepPlan, Compensation)> {
        let mut plan = self.plan(request.command(), request.guard)?;
        // The act's receipt, its bytes read from the blob store if it is
        // kept there by digest.
        let (act, receipt) = self.read(|books| {
            let act = books.latest_effect(request.run, request.step, EffectKind::Act);
            let receipt = match &act {
                Some(act) => act
                    .status
                    .act_receipt()
                    .map(|r| r.bytes(&act.key, &|d| books.blob(d)))
                    .transpose()?,
                None => None,
            };
            Ok((act, receipt))
        })?;
        if let StepPlan::Act(ctx) | StepPlan::Query(ctx) = &mut plan {
            ctx.act_receipt = receipt;
        }
        let registered = act.and_then(|act| act.compensation);
        let compensation = registered.ok_or_else(|| Error::Inconsistent {
            what: format!(
                "step {} of run {} began a compensation but registers none",
                request.step, request.run
            ),
        })?;
        Ok((plan, compensation))
    }

    /// The whole compensation in one call: `undo` runs the registered
    /// compensation (only after its intent is durable); `query` is asked,
    /// instead, when an earlier attempt's outcome is unknown and the
    /// undoing tool is queryable. A compensation already confirmed returns
    /// `Done { replayed: true }` without calling either.
    ///
    /// ```
    /// use actum::books::{Compensation, CreateRun, Outcome, RunId, RunState, StepId, ToolClass, Transition, WorkerId, digest_of};
    /// use actum::engine::{CompensationRequest, Engine, EngineOptions, StepRequest, StepResult, ToolSpec};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let engine = Engine::open(dir.path(), EngineOptions::default())?;
    /// let run = RunId::new("eod-2026-11-23")?;
    /// engine.create_run(CreateRun {
    ///     run: run.clone(),
    ///     input_digest: digest_of(b"sweep then hedge"),
    ///     agent_version: "treasury 1.0".into(),
    ///     trace_id: "t-9".into(),
    ///     parent: None,
    ///     input: None,
    /// })?;
    /// let lease = engine.acquire_lease(&run, &WorkerId::new("w1")?, 60_000)?;
    /// engine.transition(Transition { run: run.clone(), guard: lease.guard.clone(),
    ///     to: RunState::Running, expected_version: None, reason: "start".into() })?;
    /// let sweep = StepId::new("sweep")?;
    /// let queryable = ToolClass::Queryable;
    /// engine.step(
    ///     &StepRequest {
    ///         guard: &lease.guard,
    ///         run: &run,
    ///         step: &sweep,
    ///         tool: ToolSpec { name: "bank.sweep".into(), class: queryable },
    ///         args: b"usd 1m to mmf",
    ///         rationale: "cash above the policy threshold",
    ///         compensation: Some(Compensation {
    ///             tool: "bank.unsweep".into(),
    ///             args: b"usd 1m back".to_vec(),
    ///             class: queryable,
    ///         }),
    ///     },
    ///     |_| Outcome::Confirmed { receipt: b"sw-1".to_vec() },
    /// )?;
    /// // The hedge failed: undo the sweep, exactly once.
    /// let request = CompensationRequest {
    ///     guard: &lease.guard,
    ///     run: &run,
    ///     step: &sweep,
    ///     rationale: "hedge declined",
    /// };
    /// let mut undone = 0;
    /// let result = engine.compensate(
    ///     &request,
    ///     |ctx, compensation| {
    ///         assert_eq!(ctx.key.encode(), "eod-2026-11-23/sweep/undo/1");
    ///         assert_eq!(compensation.args, b"usd 1m back");
    ///         undone += 1;
    ///         Outcome::Confirmed { receipt: b"unsw-1".to_vec() }
    ///     },
    ///     |_, _| unreachable!("nothing is ambiguous"),
    /// )?;
    /// assert!(matches!(result, StepResult::Done { replayed: false, .. }));
    /// let again = engine.compensate(&request, |_, _| unreachable!(), |_, _| unreachable!())?;
    /// assert!(matches!(again, StepResult::Done { replayed: true, .. }));
    /// assert_eq!(undone, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn compensate(
        &self,
        request: &CompensationRequest<'_>,
        undo: impl FnOnce(&EffectCtx, &Compensation) -> ToolOutcome,
        query: impl FnOnce(&EffectCtx, &Compensation) -> ToolOutcome,
    ) -> Result<StepResult> {
        let (plan, compensation) = self.begin_compensation(request)?;
        match plan {
            StepPlan::Act(ctx) => {
                let outcome = undo(&ctx, &compensation);
                self.finish_step(request.guard, &ctx, outcome)
            }
            StepPlan::Query(ctx) => {
                let found = query(&ctx, &compensation);
                self.resolve_step(request.guard, &ctx, found)
            }
            StepPlan::Done(result) => Ok(result),
        }
    }
}
